"""The replay judge (face.testing.replay): the live method through it equals the authors' released judgements
aggregated directly; what it cannot identify stops a run with one line and leaves nothing in the cache.

Prompts here are rendered by the project's own code (the client under test); the judge reads them without it."""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from face.data.schema import Conversation, Particle, TurnParticles
from face.datasets.crsarena import ASPECTS, CRSArenaEval, load_conversations
from face.datasets.face_released import load_instructions, load_released_particles
from face.llm import LLMConfig
from face.methods import Inputs
from face.pipeline.method import Face
from face.pipeline.released import FaceReleased
from face.pipeline.scoring import Unit, score_messages
from face.predictions import Predictions
from face.testing.replay import Judge, Refusal, ReplayData, read_prompt, sample_values

ROOT = Path(__file__).resolve().parents[1]
# a plain one; one with an empty assistant turn (no released particle); one whose only assistant turn ("E") has
# none, so the authors have no prediction for it; one whose turn has no relevance label (not in their run file)
CONVS = ["barcor_redial_03368a16-93bd-4b21-885d-b9a21e3498ba", "unicrs_redial_57ac2c8f-75fa-49ad-be36-574004b0c47a",
         "chatgpt_opendialkg_4ef780c9-3dca-44dc-92e4-cc43eb77f686",
         "barcor_opendialkg_5f8abdf2-bd9a-429c-91ae-1c4dc382c70d"]
N_INSTRUCTIONS = 3


@pytest.fixture(scope="module")
def replay_data(data_dir) -> ReplayData:
    return ReplayData(data_dir)


@functools.lru_cache(maxsize=1)
def _conversations(data_dir: Path) -> dict[str, Conversation]:
    """CRSArena-Eval's conversations by id, as the project reads them (read once)."""
    return {c.conv_id: c for c in load_conversations(data_dir / "crsarena_eval/crs_arena_eval.json")}


@functools.lru_cache(maxsize=1)
def _particles(data_dir: Path) -> dict[tuple[str, int], TurnParticles]:
    """The released particles by (conversation, turn), as the project reads them (read once)."""
    return {(r.conv_id, r.turn_ind): r for r in load_released_particles(data_dir / "face_released/particles.jsonl")}


@pytest.fixture(scope="module")
def replay_llm(data_dir, tmp_path_factory) -> dict:
    """``llm=replay`` as the project's config composes it (once for the module: only the cache differs per test)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "llm=replay", "tracking=none", f"paths.data_dir={data_dir}",
            f"paths.cache_dir={tmp_path_factory.mktemp('replay_llm')}"])
    return OmegaConf.to_container(cfg.llm, resolve=True)


def _llm(replay_llm: dict, tmp_path: Path, **over) -> dict:
    llm = copy.deepcopy(replay_llm)
    llm["server"]["process"] = False  # a thread of the test process: no start-up of its own
    llm.update(progress=False, cache_dir=str(tmp_path / "cache"), concurrency=16, **over)
    return llm


def _inputs(data_dir: Path, tmp_path: Path, llm: dict, aspects: list[str]) -> Inputs:
    convs = [c for c in _conversations(data_dir).values() if c.conv_id in CONVS]
    return Inputs(CRSArenaEval(), convs, [ASPECTS[a] for a in aspects], data_dir, tmp_path / "run",
                  LLMConfig.from_dict(llm))


def _as_dict(p: Predictions) -> dict:
    return {**{(r.aspect, r.conv_id, r.turn_ind): r.pred for r in p.turn.itertuples()},
            **{(r.aspect, r.conv_id): r.pred for r in p.dialogue.itertuples()}}


LIVE_ASPECTS = ["relevance", "dialogue_overall"]


@pytest.fixture(scope="module")
def released_predictions(data_dir, tmp_path_factory) -> dict:
    """The authors' released scores of the first N_INSTRUCTIONS instructions of each of LIVE_ASPECTS (by rank, as
    method.instructions.max takes them), aggregated directly."""
    tmp = tmp_path_factory.mktemp("released")
    want = {}
    for a in LIVE_ASPECTS:
        ids = [i.instruction_id for i in load_instructions(data_dir / f"face_released/top16_instructions/{a}.json")]
        one = _inputs(data_dir, tmp, {}, [a])
        want.update(_as_dict(FaceReleased(instructions=ids[:N_INSTRUCTIONS]).predict(one).predictions))
    return want


@pytest.mark.parametrize("source,estimator,reasoning", [("llm", "sampling", True), ("released", "sampling", True),
                                                        ("llm", "logprobs", True), ("released", "sampling", False)])
def test_live_method_through_the_replay_equals_the_released_judgements(data_dir, replay_llm, tmp_path, source,
                                                                       estimator, reasoning, released_predictions):
    inputs = _inputs(data_dir, tmp_path, _llm(replay_llm, tmp_path), LIVE_ASPECTS)
    face = Face(particles={"source": source, "k": 20}, instructions={"max": N_INSTRUCTIONS},
                scoring={"estimator": estimator, "n": 5, "reasoning": reasoning})
    live = face.predict(inputs)
    got, want = _as_dict(live.predictions), released_predictions
    assert got.keys() == want.keys()
    assert all(math.isclose(got[k], want[k], abs_tol=1e-10) for k in want), \
        [(k, got[k], want[k]) for k in want if not math.isclose(got[k], want[k], abs_tol=1e-10)]
    # the authors' gaps, kept: no prediction for the empty turn, the conversation without particles, the turn
    # without a relevance label
    assert ("relevance", CONVS[1], 9) not in got and ("dialogue_overall", CONVS[2]) not in got
    assert ("relevance", CONVS[3], 1) not in got and ("dialogue_overall", CONVS[3]) in got
    report = json.loads((tmp_path / "run" / "llm_server.json").read_text())
    assert report["refused"] == 0 and report["ambiguous_requests"] == 0
    assert report["logprobs_requests"] == (report["scoring"] if estimator == "logprobs" else 0)
    assert report["decomposition"] == (sum(len(c.evaluated_turns()) for c in inputs.convs) if source == "llm" else 0)


def test_five_samples_average_the_released_value_and_fewer_stay_within_one_over_m():
    for total in range(0, 21):  # every mean of 5 integer samples on 0..4
        v = total / 5
        for start in range(7):  # any 5 consecutive sample indices
            xs = sample_values(v, list(range(start, start + 5)))
            assert sum(xs) == total and all(math.floor(v) <= x <= math.ceil(v) for x in xs)
        for m in range(1, 5):
            assert abs(sum(sample_values(v, list(range(m)))) / m - v) < 1 / m
    assert sample_values(0.6, [0, 1, 2, 3, 4]) == [0, 1, 0, 1, 1]  # by hand: floor(3(i+1)/5) - floor(3i/5)


def _prompt(data_dir, aspect: str, conv_id: str, turn_ind: int, particle_ind: int, instruction: str | None = None,
            reasoning: bool = True, particle: Particle | None = None):
    convs, parts = _conversations(data_dir), _particles(data_dir)
    ins = load_instructions(data_dir / f"face_released/top16_instructions/{aspect}.json")[0]
    p = particle or parts[(conv_id, turn_ind)].particles[particle_ind]
    unit = Unit(ASPECTS[aspect], conv_id, turn_ind, particle_ind, p)
    msgs = score_messages(unit, convs[conv_id], instruction or ins.text, reasoning=reasoning)
    return [{"role": r, "content": c} for r, c in msgs], ins.instruction_id


def test_logprobs_answer_has_the_released_value_as_its_expectation(replay_data, data_dir):
    judge = Judge(replay_data)
    msgs, instr = _prompt(data_dir, "dialogue_overall", CONVS[0], 3, 2)
    value = replay_data.scores["dialogue_overall"][CONVS[0]][3][2][instr]
    out = judge.answer({"messages": msgs, "n": 1, "logprobs": True, "top_logprobs": 5})
    tokens = out["choices"][0]["logprobs"]["content"]
    at = max(i for i, t in enumerate(tokens) if t["token"].strip().isdigit())
    dist = {int(t["token"]): math.exp(t["logprob"]) for t in tokens[at]["top_logprobs"] if t["token"].strip().isdigit()}
    assert math.isclose(sum(d * p for d, p in dist.items()) / sum(dist.values()), value, abs_tol=1e-12)
    assert "".join(t["token"] for t in tokens) == out["choices"][0]["message"]["content"]


def test_a_request_from_sample_k_is_answered_with_the_samples_from_k_on(replay_data, data_dir):
    """The request's seed is the index of its first sample (face/llm/transport.py: seed + first_sample): a request
    of the samples k.. is answered with what a request from 0 answers at k.. (a redraw, a split request)."""
    first_instruction = load_instructions(data_dir / "face_released/top16_instructions/relevance.json")[0]
    table = replay_data.scores["relevance"][CONVS[0]]
    turn, particle = next((t, i) for t, ps in table.items() for i, vs in ps.items()
                          if vs[first_instruction.instruction_id] % 1)  # not an integer: its samples differ
    msgs, instr = _prompt(data_dir, "relevance", CONVS[0], turn, particle, reasoning=False)
    judge = Judge(replay_data)

    def scores(seed: int, n: int) -> list[int]:
        out = judge.answer({"messages": msgs, "n": n, "seed": seed})
        return [json.loads(c["message"]["content"])["score"] for c in out["choices"]]

    first = scores(0, 10)
    assert len(set(first)) > 1 and sum(first[:5]) / 5 == pytest.approx(table[turn][particle][instr])
    assert [scores(k, 1)[0] for k in range(10)] == first and scores(3, 4) == first[3:7]


@pytest.mark.parametrize("what,code", [
    ("another method", "unknown_prompt"), ("whole turn", "whole_unit"), ("instruction", "unknown_instruction"),
    ("particle", "unknown_particle"), ("scale", "wrong_scale"), ("history", "history_mismatch")])
def test_what_the_replay_cannot_identify_is_refused_with_the_reason(replay_data, data_dir, what, code):
    msgs, _ = _prompt(data_dir, "relevance", CONVS[0], 3, 1)
    user = msgs[-1]["content"]
    if what == "another method":
        msgs[-1]["content"] = "Rate the assistant turn below for relevance.\n\nAssistant turn:\nHi\n\nAnswer: "
    elif what == "whole turn":
        msgs[-1]["content"] = user[:user.index("Target particle")] + "Target: the whole current assistant turn.\n\n" \
            + user[user.index("Follow the instruction"):]
    elif what == "instruction":
        msgs[-1]["content"] = user.replace("Task description:", "Task description (reworded):")
    elif what == "particle":
        msgs[-1]["content"] = user.replace("- mention: ", "- mention: not ")
    elif what == "scale":
        msgs[-1]["content"] = user.replace("<integer from 0 to 2>", "<integer from 1 to 5>")
    else:
        msgs[-1]["content"] = user.replace("Turn 2 - USER: ", "Turn 2 - USER: well, ")
    with pytest.raises(Refusal) as e:
        Judge(replay_data).answer({"messages": msgs, "n": 5})
    assert e.value.code == code


def test_identical_particles_of_a_turn_get_the_first_ones_judgement_and_are_counted(replay_data, data_dir):
    group = next((cid, t, [i for i, q in enumerate(ps) if q == p])
                 for (cid, t), ps in replay_data.shown.items() for p in ps if ps.count(p) > 1)
    cid, turn, members = group
    judge = Judge(replay_data)
    msgs, instr = _prompt(data_dir, "understanding", cid, turn, members[-1])
    view = read_prompt(msgs)
    assert replay_data.resolve(view).particle_ind == members[0]
    out = judge.answer({"messages": msgs, "n": 5, "seed": 0})
    first = replay_data.scores["understanding"][cid][turn][members[0]][instr]
    values = [json.loads(c["message"]["content"].splitlines()[-1])["score"] for c in out["choices"]]
    assert sum(values) / 5 == pytest.approx(first)
    report = judge.report()
    assert report["ambiguous_requests"] == 1 and report["ambiguous"][0]["answered"]["particle_ind"] == members[0]
    assert [c["particle_ind"] for c in report["ambiguous"][0]["candidates"]] == members


@pytest.mark.slow
def test_an_unidentifiable_request_stops_the_run_with_one_line_and_caches_nothing(data_dir, tmp_path):
    cache = tmp_path / "cache"
    cmd = [sys.executable, "scripts/run.py", "experiment=crsarena_main", "llm=replay", "dataset.limit=1",
           "method.unit=whole", "tracking=none", f"paths.data_dir={data_dir}", "paths.data_mirror=null",
           f"llm.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}", "llm.progress=false"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 4, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip() and "WARNING" not in x and "INFO" not in x]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("stopped: the LLM endpoint refused a request (HTTP 400, whole_unit")
    assert "as a whole" in lines[0] and "method.unit=whole cannot be replayed" in lines[0]
    db = cache / "llm_cache.sqlite"
    assert not db.exists() or sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0


def test_a_conversation_copy_is_read_as_its_original(replay_data, data_dir):
    from face.datasets.crsarena import copy_of

    convs = _conversations(data_dir)
    copy = copy_of(convs[CONVS[0]], 3)
    assert copy.conv_id == CONVS[0] + "~3" and all(t.utterance.endswith(" (copy 3)") for t in copy.turns)
    assert [t.labels for t in copy.turns] == [t.labels for t in convs[CONVS[0]].turns]
    parts = _particles(data_dir)
    ins = load_instructions(data_dir / "face_released/top16_instructions/task_completion.json")[0]
    p = parts[(CONVS[0], 3)].particles[1]
    msgs = score_messages(Unit(ASPECTS["task_completion"], copy.conv_id, 3, 1, p), copy, ins.text, reasoning=True)
    view = read_prompt([{"role": r, "content": c} for r, c in msgs])
    j = replay_data.resolve(view)
    assert (j.conv.conv_id, j.turn_ind, j.particle_ind) == (CONVS[0], 3, 1)


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_the_judge_stops_when_the_process_that_started_it_is_killed(data_dir):
    code = ("import os, sys; from face.testing.replay import ReplayServer; "
            f"s = ReplayServer({str(data_dir)!r}).start(); print(s._proc.pid, flush=True); os._exit(9)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    pid = int(r.stdout.split()[0])
    status = Path(f"/proc/{pid}/status")
    for _ in range(100):  # its standard input (a pipe from the dead process) is closed: it stops
        state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
        if state in ("Z", "X", "gone"):  # exited (a zombie until whoever adopted it reaps it)
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    raise AssertionError("the replay judge outlived the process that started it")


# ------------------------------------------------------------------ the judge as a server users point tools at
@pytest.fixture(scope="module")
def judge_url(data_dir):
    """The judge's HTTP app on 127.0.0.1 in a thread of this process (its base URL without /v1)."""
    from face.testing.replay import ReplayServer

    with ReplayServer(str(data_dir), process=False) as server:
        yield server.base_url.rsplit("/v1", 1)[0]


def _http(url: str, raw: bytes | None = None, method: str = "POST", timeout: float = 30) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=raw, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _error_of(status_body: tuple[int, bytes], status: int) -> dict:
    """The error object of a JSON error answer with this status, in the documented shape."""
    got, raw = status_body
    assert got == status, raw[:300]
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "code", "param"} and err["message"].startswith("replay judge: ")
    assert err["type"] == "invalid_request_error"
    return err


def _valid_body(data_dir, **over) -> dict:
    msgs, _ = _prompt(data_dir, "relevance", CONVS[0], 3, 1)
    return {"model": "face-released-judgements", "messages": msgs, "n": 5, "seed": 0, **over}


MALFORMED = {  # name: (body as sent, or a function of a valid FACE scoring body; code; param)
    "a JSON array": (b"[1, 2]", "invalid_type", None),
    "a JSON string": (b'"hello"', "invalid_type", None),
    "a JSON number": (b"5", "invalid_type", None),
    "JSON null": (b"null", "invalid_type", None),
    "integer messages": (b'{"messages": [1, 2]}', "invalid_type", "messages[0]"),
    "200,000-level nesting": (b"[" * 200_000 + b"]" * 200_000, "bad_json", None),
    "not JSON": (b'{"messages": [', "bad_json", None),
    "n as a string": (lambda b: dict(b, n="3"), "invalid_type", "n"),
    "max_tokens as a string": (lambda b: dict(b, max_tokens="50"), "invalid_type", "max_tokens"),
    "seed as a string": (lambda b: dict(b, seed="7"), "invalid_type", "seed"),
    "response_format as a string": (lambda b: dict(b, response_format="json_object"), "invalid_type",
                                    "response_format"),
    "response_format as a list": (lambda b: dict(b, response_format=[{"type": "json_object"}]), "invalid_type",
                                  "response_format"),
    "n = -3": (lambda b: dict(b, n=-3), "invalid_value", "n"),
    "n = 0": (lambda b: dict(b, n=0), "invalid_value", "n"),
    "n over the maximum": (lambda b: dict(b, n=1_000_000), "invalid_value", "n"),
    "n as a boolean": (lambda b: dict(b, n=True), "invalid_type", "n"),
    "a message's content as a number": (lambda b: dict(b, messages=[{"role": "user", "content": 5}]),
                                        "invalid_type", "messages[0].content"),
    "a JSON-schema scale that is not numbers": (
        lambda b: dict(b, messages=[{"role": "user", "content": b["messages"][-1]["content"].replace(
            '{"score": <integer from 0 to 2>}', "a score")}],
            response_format={"type": "json_schema", "json_schema": {"schema": {"properties": {"score": {
                "enum": ["a", {}]}}}}}), "wrong_scale", None),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_request_gets_a_400_json_error_naming_the_field(judge_url, data_dir, kind):
    body, code, param = MALFORMED[kind]
    raw = body if isinstance(body, bytes) else json.dumps(body(_valid_body(data_dir))).encode()
    err = _error_of(_http(judge_url + "/v1/chat/completions", raw), 400)
    assert (err["code"], err["param"]) == (code, param), err
    assert param is None or err["message"].startswith(f"replay judge: {param} must be ")
    # the judge still answers a valid request afterwards
    status, raw = _http(judge_url + "/v1/chat/completions", json.dumps(_valid_body(data_dir)).encode())
    assert status == 200 and len(json.loads(raw)["choices"]) == 5


@pytest.mark.parametrize("n", [1, 128])
def test_n_up_to_the_documented_maximum_is_answered_with_n_choices(judge_url, data_dir, n):
    from face.testing.replay.answers import MAX_N

    assert MAX_N == 128
    status, raw = _http(judge_url + "/v1/chat/completions", json.dumps(_valid_body(data_dir, n=n)).encode())
    assert status == 200 and [c["index"] for c in json.loads(raw)["choices"]] == list(range(n))


def test_unknown_path_wrong_method_and_oversized_body_get_json_errors(judge_url, data_dir):
    from face.testing.replay.server import MAX_BODY_BYTES

    assert _error_of(_http(judge_url + "/v1/completions", b"{}"), 404)["code"] == "not_found"
    assert _error_of(_http(judge_url + "/v1/chat/completions", method="GET"), 405)["code"] == "method_not_allowed"
    big = json.dumps(_valid_body(data_dir, metadata="x" * MAX_BODY_BYTES)).encode()
    assert _error_of(_http(judge_url + "/v1/chat/completions", big), 413)["code"] == "body_too_large"
    small = json.dumps(_valid_body(data_dir, metadata="x" * 1000)).encode()  # unknown fields are ignored
    assert _http(judge_url + "/v1/chat/completions", small)[0] == 200


@pytest.mark.slow
@pytest.mark.serial  # times /health (never a second): not beside another test
def test_soak_malformed_and_valid_requests_interleaved_never_stall_or_break_the_judge(replay_data, data_dir):
    """``python -m face.testing.replay`` on 127.0.0.1 (its own process, as users run it): every malformed kind, the
    HTTP errors and valid prompts (n up to the maximum) sent from 8 threads for a bounded number of rounds, while
    /health is polled. Every answer is what it should be, valid ones equal the in-process judge's, /health never
    waits a second, the server's memory stays bounded and its count of answered requests is exact."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from face.testing.replay import ReplayServer

    valid = [_valid_body(data_dir, n=n, seed=s) for n, s in ((1, 0), (5, 3), (128, 11))]
    valid += [dict(_valid_body(data_dir), messages=_prompt(data_dir, "dialogue_overall", CONVS[0], 3, 2)[0], n=5)]
    want = [Judge(replay_data).answer(b)["choices"] for b in valid]
    cases = [("valid", json.dumps(b).encode(), 200, i) for i, b in enumerate(valid)]
    for kind, (body, code, _) in MALFORMED.items():
        raw = body if isinstance(body, bytes) else json.dumps(body(_valid_body(data_dir))).encode()
        cases.append((kind, raw, 400, code))
    cases.append(("oversized", b'{"messages": "' + b"x" * 2_000_000 + b'"}', 413, "body_too_large"))
    rounds = 25
    work = [c for _ in range(rounds) for c in cases]
    with ReplayServer(str(data_dir), process=True) as srv:
        base = srv.base_url.rsplit("/v1", 1)[0]
        waits, done = [], threading.Event()

        def poll() -> None:
            while not done.is_set():
                t = time.perf_counter()
                assert _http(base + "/health", method="GET", timeout=10)[0] == 200
                waits.append(time.perf_counter() - t)
                time.sleep(0.02)

        def send(case) -> tuple:
            kind, raw, status, what = case
            got, body = _http(srv.base_url + "/chat/completions", raw, timeout=60)
            return kind, status, what, got, body

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(send, work))
        finally:
            done.set()
            poller.join()
        rss_kb = int(Path(f"/proc/{srv._proc.pid}/status").read_text().split("VmRSS:")[1].split()[0])
        stats = srv.report()
    for kind, status, what, got, body in results:
        if status == 200:
            assert got == 200 and json.loads(body)["choices"] == want[what], kind
        else:
            assert _error_of((got, body), status)["code"] == what, kind
    assert len(waits) > 10 and max(waits) < 1.0, f"/health waited {max(waits):.2f} s"
    assert rss_kb < 512 * 1024, f"the judge holds {rss_kb / 1024:.0f} MiB"
    assert stats["requests"] == rounds * len(valid) and stats["samples"] == rounds * sum(b["n"] for b in valid)
