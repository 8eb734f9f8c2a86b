"""`llm.batch=true`: requests go through the OpenAI Batch API (scripted batch endpoint) and land in the same
cache as HTTP answers; a half-finished batch is resumed, not sent again; failed lines are not cached."""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time

import pytest

from face.llm import ChatRequest, LLMConfig, make_client
from face.llm.cache import CACHE_FILE
from face.testing.scripted import ScriptedServer


@pytest.fixture
def server():
    """The Batch API is served over HTTP (files, batches): the scripted HTTP server."""
    srv = ScriptedServer()
    with srv:
        yield srv

PROMPTS = [f"Rate the recommendation in conversation {i}." for i in range(12)]


def _requests(n: int = 3) -> list[ChatRequest]:
    return [ChatRequest(messages=p, n=n, tag="score") for p in PROMPTS]


def _batch_cfg(make_cfg, **kw) -> LLMConfig:
    return make_cfg(**{"batch": True, "batch_poll_s": 0.02, "batch_collect_s": 0.05, "n_per_request": 8, **kw})


def _cache_keys(cfg: LLMConfig) -> set[str]:
    with sqlite3.connect(f"{cfg.cache_dir}/{CACHE_FILE}") as db:
        return {k for (k,) in db.execute("SELECT key FROM samples")}


async def _dies_while_its_batch_is_in_progress(client, server) -> None:
    """The requests of a run that stops ("dies") once its batch is submitted and journaled (its first poll
    reached the endpoint) while the endpoint holds it in progress."""
    run = asyncio.ensure_future(client.chat_many(_requests()))
    deadline = time.monotonic() + 60
    while server.batch.polls == 0 and not run.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert server.batch.polls > 0 and not run.done()
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run


def test_batch_answers_equal_http_answers_and_an_http_client_replays_them_from_the_cache(server, make_cfg, tmp_path):
    bcfg = _batch_cfg(make_cfg, price_input_per_mtok=1.0, price_output_per_mtok=2.0)
    with make_client(bcfg) as client:
        got = client.run_batch(_requests())
        usage = client.usage
    assert len(server.batch.jobs) == 1 and server.ok_requests() == []  # one job, no chat request over HTTP
    [job] = server.batch.jobs.values()
    assert job["request_counts"] == {"total": len(PROMPTS), "completed": len(PROMPTS), "failed": 0}
    # billed at half the list price: $1 / $2 per million tokens -> $0.5 / $1
    assert usage.spent_usd == pytest.approx((usage.input_tokens * 0.5 + usage.output_tokens * 1.0) / 1e6)
    assert usage.input_tokens > 0

    hcfg = make_cfg(cache_dir=str(tmp_path / "http-cache"), n_per_request=8)
    with make_client(hcfg) as client:
        direct = client.run_batch(_requests())
    assert [r.texts for r in got] == [r.texts for r in direct]

    with make_client(make_cfg(n_per_request=8)) as client:  # HTTP mode on the batch run's cache
        replay = client.run_batch(_requests())
        assert client.usage.http_requests == 0
    assert [r.texts for r in replay] == [r.texts for r in got]
    assert all(r.cached_samples == 3 for r in replay)


def test_custom_ids_are_the_cache_keys_of_the_samples(server, make_cfg):
    cfg = _batch_cfg(make_cfg)
    with make_client(cfg) as client:
        client.run_batch(_requests(n=1))
    [upload] = [data for purpose, data in server.batch.files.values() if purpose == "batch"]
    ids = {json.loads(line)["custom_id"] for line in upload.decode().splitlines()}
    assert len(ids) == len(PROMPTS)
    assert ids == _cache_keys(cfg)


def test_a_half_finished_batch_is_resumed_not_sent_again(server, make_cfg):
    cfg = _batch_cfg(make_cfg)
    server.batch.gate.clear()  # the endpoint keeps the batch in progress
    with make_client(cfg) as client:
        client.run_async(_dies_while_its_batch_is_in_progress(client, server))
    assert len(server.batch.jobs) == 1
    assert _cache_keys(cfg) == set()

    server.batch.gate.set()
    with make_client(cfg) as client:
        resumed = client.run_batch(_requests())
        assert client.usage.http_requests == len(PROMPTS)  # the pieces were answered, by the first job
    assert len(server.batch.jobs) == 1
    assert len([f for f in server.batch.files.values() if f[0] == "batch"]) == 1  # nothing uploaded again
    assert all(len(r.samples) == 3 and all(s.text for s in r.samples) for r in resumed)
    assert len(_cache_keys(cfg)) == 3 * len(PROMPTS)


def test_failed_lines_are_errors_not_cache_entries_and_only_they_are_sent_again(server, make_cfg):
    cfg = _batch_cfg(make_cfg)
    with make_client(cfg) as client:
        first = client.run_batch(_requests(n=1))
    bad = sorted(_cache_keys(cfg))[0]  # the same prompts in a fresh cache, with this line failing
    server.batch.fail_ids.add(bad)
    cfg2 = _batch_cfg(make_cfg, cache_dir=cfg.cache_dir + "-2")
    with make_client(cfg2) as client:
        out = client.run_batch(_requests(n=1), on_error="return")
    failed = [r for r in out if r.error]
    assert len(failed) == 1 and "status 500" in failed[0].error
    assert bad not in _cache_keys(cfg2) and len(_cache_keys(cfg2)) == len(PROMPTS) - 1

    server.batch.fail_ids.clear()
    with make_client(cfg2) as client:
        again = client.run_batch(_requests(n=1))
    last = server.batch.jobs[max(server.batch.jobs)]
    assert last["request_counts"]["total"] == 1  # only the failed line went out again
    assert [r.texts for r in again] == [r.texts for r in first]


def test_an_expired_batch_caches_what_it_answered_and_the_rest_is_sent_again(server, make_cfg):
    cfg = _batch_cfg(make_cfg)
    server.batch.expire_after = 5
    with make_client(cfg) as client:
        out = client.run_batch(_requests(n=1), on_error="return")
    assert sum(r.error is None for r in out) == 5
    assert all("ended expired without an answer" in r.error for r in out if r.error)
    assert len(_cache_keys(cfg)) == 5

    server.batch.expire_after = None
    with make_client(cfg) as client:
        client.run_batch(_requests(n=1))
    assert server.batch.jobs[max(server.batch.jobs)]["request_counts"]["total"] == len(PROMPTS) - 5
    assert len(_cache_keys(cfg)) == len(PROMPTS)


def test_a_batch_the_endpoint_rejects_fails_every_request_with_its_reason(server, make_cfg, monkeypatch):
    from face.llm import batch

    monkeypatch.setattr(batch, "ENDPOINT", "/v1/embeddings")  # an endpoint the scripted batch API refuses
    with make_client(_batch_cfg(make_cfg)) as client:
        out = client.run_batch(_requests(n=1), on_error="return")
    assert all("ended failed" in r.error and "bad url" in r.error for r in out)


@pytest.mark.parametrize("bad, message", [
    ({"cache": False}, "needs the cache"),
    ({"server": {"_target_": "face.testing.scripted.ScriptedServer"}}, "at llm.base_url"),
    ({"batch_poll_s": 0}, "llm.batch_poll_s must be a finite number > 0, got 0"),
    ({"batch_price_factor": 1.5}, "llm.batch_price_factor must be a finite number in (0, 1], got 1.5"),
])
def test_bad_batch_settings_are_refused_before_anything_is_sent(make_cfg, bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _batch_cfg(make_cfg, **bad)


def test_a_journaled_batch_the_endpoint_does_not_know_is_sent_again(server, make_cfg):
    cfg = _batch_cfg(make_cfg)
    server.batch.gate.clear()
    with make_client(cfg) as client:
        client.run_async(_dies_while_its_batch_is_in_progress(client, server))
    server.batch.jobs.clear()  # e.g. another account's key, or the job was deleted
    server.batch.gate.set()
    with make_client(cfg) as client:
        out = client.run_batch(_requests())
    assert len(server.batch.jobs) == 1 and len(_cache_keys(cfg)) == 3 * len(PROMPTS)
    assert all(len(r.samples) == 3 for r in out)
