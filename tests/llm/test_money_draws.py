"""The one draw-until-valid loop (face/llm/validating.py, with face/llm/base.py's ``Draws``) and what the cache stores
and serves (face/llm/cache.py), in process and without a server, against counts and indices worked out by hand."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from money_lm import MSGS, Answer, Scripted, cfg, run, usage

from face.llm.base import ChatRequest, Completion, Draws, LLMCallError, request_params
from face.llm.cache import CachingLM, SampleCache
from face.llm.validating import ValidatingLM

# ---------------------------------------------------------------- the draw-until-valid loop


def _validated(texts, n, draws, inner=None):
    inner = inner or Scripted(texts)
    u = usage()
    res = run(ValidatingLM(inner, u).chat(ChatRequest(MSGS, n=n, adapter=Answer(), draws=draws)))
    return res, inner, u


def test_every_invalid_answer_is_redrawn_at_fresh_indices_until_n_are_valid():
    texts = {0: "ok0", 1: "bad", 2: "bad", 3: "ok3", 4: "bad", 5: "ok5"}
    res, inner, _ = _validated(texts, 3, Draws(rounds=4, max_extra=None))
    assert inner.asked == [(0, 3), (3, 2), (5, 1)]  # one fresh index per answer still missing
    assert [s.value for s in res.answers] == [("ok0",), ("ok3",), ("ok5",)]
    assert (res.answer_retries, res.rejected_answers, res.invalid_samples) == (3, 3, 0)


def test_one_invalid_answer_of_n_is_redrawn():
    res, inner, _ = _validated({2: "bad"}, 3, Draws(rounds=2, max_extra=None))
    assert inner.asked == [(0, 3), (3, 1)]
    assert [s.value for s in res.answers] == [("ok",)] * 3 and res.invalid_samples == 0


def test_draws_stop_after_exactly_the_policys_rounds():
    texts = dict.fromkeys(range(20), "bad")
    res, inner, u = _validated(texts, 3, Draws(rounds=2, max_extra=None))
    assert inner.asked == [(0, 3), (3, 3)]
    assert (res.answer_retries, res.rejected_answers, res.invalid_samples) == (3, 6, 3)
    assert len(u.invalid_events) == 3 and "no valid answer in 6 draws" in u.invalid_events[0]["reason"]


def test_max_extra_caps_the_redraws_over_the_whole_request():
    res, inner, _ = _validated(dict.fromkeys(range(20), "bad"), 3, Draws(rounds=5, max_extra=2))
    assert inner.asked == [(0, 3), (3, 2)]
    assert res.answer_retries == 2


def test_draws_room_is_one_per_missing_answer_within_max_extra():
    assert Draws(rounds=3, max_extra=None).room(4, 10) == 4
    assert Draws(rounds=3, max_extra=5).room(4, 3) == 2
    assert Draws(rounds=3, max_extra=5).room(1, 3) == 1


def test_the_earliest_provisional_draw_stands_in_for_a_missing_answer():
    res, _, _ = _validated({0: "prov:first", 1: "prov:second"}, 1, Draws(rounds=2, max_extra=None))
    assert [s.value for s in res.answers] == [("first",)] and res.invalid_samples == 0


def test_a_dry_run_is_drawn_once():
    res, inner, _ = _validated({}, 2, Draws(rounds=4, max_extra=None), inner=Scripted(dry_run=True))
    assert inner.asked == [(0, 2)] and res.answer_retries == 0


# ---------------------------------------------------------------- the cache


def _caching(tmp_path, inner, **settings) -> CachingLM:
    return CachingLM(inner, SampleCache(tmp_path), cfg(**settings), "m")


def _key(req: ChatRequest, c, i: int) -> str:
    """A sample's key by its definition: the sha256 of the canonical JSON of everything that determines it."""
    fields = {"model": "m", "messages": [list(m) for m in req.messages], **request_params(c, req), "seed": c.seed,
              "sample_index": i}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
                          ).hexdigest()


def test_the_read_ahead_keys_are_the_samples_own_keys(tmp_path):
    lm = _caching(tmp_path, Scripted())
    req = ChatRequest(MSGS, n=3, first_sample=4)
    assert lm.keys_for(req) == {i: _key(req, lm.cfg, i) for i in (4, 5, 6)}
    other = _caching(tmp_path, Scripted(), seed=1)
    assert other.keys_for(req)[4] == _key(req, other.cfg, 4) != lm.keys_for(req)[4]  # the seed is part of the key
    # a response format that quotes the index's own mark (a property "sample_index" of that very value): still exact
    schema = {"type": "json_schema", "json_schema": {"schema": {"sample_index": -7_319_046_251}}}
    quoted = _caching(tmp_path, Scripted(), supports_json_schema=True)
    req = ChatRequest(MSGS, n=2, response_format=schema)
    assert quoted.keys_for(req) == {i: _key(req, quoted.cfg, i) for i in (0, 1)}


def test_dry_run_placeholders_are_never_stored(tmp_path):
    lm = _caching(tmp_path, Scripted(dry_run=True), dry_run=True)
    run(lm.chat(ChatRequest(MSGS, n=2)))
    lm.store.flush(force=True)
    assert len(lm.store) == 0


def test_an_invalid_draw_is_stored_marked_invalid_and_served_as_invalid(tmp_path):
    first = _caching(tmp_path, Scripted({0: "bad"}))
    run(first.chat(ChatRequest(MSGS, n=2, adapter=Answer(), draws=Draws(rounds=1, max_extra=None))))
    first.store.flush(force=True)
    asked = Scripted()
    again = CachingLM(asked, first.store, cfg(), "m")
    res = run(again.chat(ChatRequest(MSGS, n=2)))  # without the answer type: the stored mark alone decides
    assert asked.asked == [] and res.cached_samples == 2
    assert res.samples[0].error == "not ok" and res.samples[1].error is None


def test_the_read_ahead_counts_its_samples_as_cache_hits(tmp_path):
    lm = _caching(tmp_path, Scripted())
    req = ChatRequest(MSGS, n=3)
    run(lm.chat(req))
    lm.store.flush(force=True)
    keys = lm.keys_for(req)
    [res] = lm.results([req], [keys], lm.store.get_many(keys.values()))
    assert res.cached_samples == 3 and [s.text for s in res.samples] == ["ok"] * 3


def test_a_provisional_draw_is_not_kept_when_a_valid_answer_came():
    res, _, _ = _validated({0: "prov:x", 1: "ok"}, 1, Draws(rounds=2, max_extra=None))
    assert [s.value for s in res.answers] == [("ok",)] and res.samples[0].error is not None


def test_the_invalid_answer_note_counts_its_draws():
    _, _, u = _validated({0: "bad"}, 1, Draws(rounds=1, max_extra=None))
    assert "no valid answer in 1 draw;" in u.invalid_events[0]["reason"]
    _, _, u = _validated({0: "bad", 1: "bad"}, 1, Draws(rounds=2, max_extra=None))
    assert "no valid answer in 2 draws; last: not ok" in u.invalid_events[0]["reason"]


def test_a_request_without_an_answer_type_passes_through_once():
    inner = Scripted({0: "bad"})
    res = run(ValidatingLM(inner, usage()).chat(ChatRequest(MSGS, n=2)))
    assert inner.asked == [(0, 2)] and res.texts == ["bad", "ok"]


def test_a_dry_run_is_not_redrawn_even_where_a_cached_draw_was_invalid():
    class Mixed(Scripted):  # sample 0 from the cache, marked invalid; the others dry-run placeholders
        async def chat(self, req):
            res = await super().chat(req)
            res.samples = [Completion("bad", "stop", sample_index=i, cached=True) if i == 0 else
                           Completion("", "dry_run", sample_index=i, dry_run=True) for i in req.indices]
            return res

    res, inner, _ = _validated({}, 2, Draws(rounds=4, max_extra=None), inner=Mixed())
    assert inner.asked == [(0, 2)] and len(res.samples) == 2


def test_a_request_the_read_ahead_found_in_part_sends_only_its_missing_samples(tmp_path):
    lm = _caching(tmp_path, Scripted({0: "zero", 1: "one"}))
    run(lm.chat(ChatRequest(MSGS, n=2)))
    lm.store.flush(force=True)
    asked = Scripted(dry_run=True)  # a dry run claims nothing: only what the read-ahead found is served
    again = CachingLM(asked, lm.store, cfg(dry_run=True), "m")
    req = ChatRequest(MSGS, n=3)
    keys = again.keys_for(req)
    assert again.results([req], [keys], again.store.get_many(keys.values())) == [None]  # sample 2 is missing
    res = run(again.chat(req))
    assert asked.asked == [(2, 1)] and res.cached_samples == 2
    assert [(s.text, s.finish_reason) for s in res.samples][:2] == [("zero", "stop"), ("one", "stop")]
    assert res.samples[2].dry_run


def test_a_sample_another_process_is_sending_is_waited_for_not_sent_again(tmp_path):
    inner = Scripted()

    async def main():
        other = SampleCache(tmp_path)  # another owner of the same cache (as another process would be)
        lm = CachingLM(inner, SampleCache(tmp_path), cfg(), "m")
        req = ChatRequest(MSGS, n=2)
        keys = lm.keys_for(req)
        await other.claim([keys[1]])  # the other one is sending sample 1
        task = asyncio.create_task(lm.chat(req))
        await asyncio.sleep(0.1)
        other.put_many([(keys[1], "m", "", 1, {"text": "theirs", "finish_reason": "stop", "logprobs": None})],
                       release=[keys[1]])
        return await asyncio.wait_for(task, 10)

    res = run(main())
    assert inner.asked == [(0, 1)]
    assert [s.text for s in res.samples] == ["ok", "theirs"] and res.cached_samples == 1


def test_a_sample_another_process_answered_since_the_read_ahead_is_read_when_claimed_not_sent(tmp_path):
    inner = Scripted()
    lm = _caching(tmp_path, inner)
    req = ChatRequest(MSGS, n=2)
    keys = lm.keys_for(req)
    assert lm.results([req], [keys], {}) == [None]  # the read-ahead found neither sample
    SampleCache(tmp_path).put_many([(keys[1], "m", "", 1, {"text": "theirs", "finish_reason": "stop"})])  # then
    res = run(lm.chat(req))
    assert inner.asked == [(0, 1)]
    assert [s.text for s in res.samples] == ["ok", "theirs"] and res.cached_samples == 1


class _Stuck(Scripted):
    """An inner layer that fails (``fail``) or never answers."""

    def __init__(self, fail: bool):
        super().__init__()
        self.fail = fail

    async def chat(self, req: ChatRequest):
        self.asked.append((req.first_sample, req.n))
        if self.fail:
            raise LLMCallError("the endpoint failed")
        await asyncio.Event().wait()


@pytest.mark.parametrize("how", ["failed", "cancelled while sent", "cancelled once claimed, before it was sent"])
def test_a_failed_or_cancelled_request_gives_its_claims_back_at_once(tmp_path, how):
    inner = _Stuck(fail=how == "failed")
    lm = _caching(tmp_path, inner)
    req = ChatRequest(MSGS, n=3)  # n_per_request 2: two sub-requests
    keys = set(lm.keys_for(req).values())

    async def main():
        task = asyncio.create_task(lm.chat(req))
        if how == "cancelled once claimed, before it was sent":
            while not lm.store.claims.held:  # the claims settled; the request has not run since
                await asyncio.sleep(0)
        else:
            while len(inner.asked) < 2:
                await asyncio.sleep(0.001)
        if how != "failed":
            task.cancel()
        with pytest.raises((LLMCallError, asyncio.CancelledError)):
            await task
        await asyncio.sleep(0)  # the next transaction of this cache
        return await SampleCache(tmp_path).claim(list(keys))  # another process

    other = run(main())
    assert other.mine == keys and not lm.store.claims.held
    assert inner.asked == ([] if how.endswith("before it was sent") else [(0, 2), (2, 1)])
