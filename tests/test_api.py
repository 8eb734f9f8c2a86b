"""The Python API (``import face``): face.evaluate / estimate / meta_evaluate on the scripted server, checked
against values computed here from the raw samples, scipy, and the files `face evaluate` writes."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import write_logs
from scipy import stats
from test_cli import CHAT as CLI_CHAT

import face
from face.data.schema import Conversation, Turn
from face.testing.scripted import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
CHAT = [*CLI_CHAT, {"id": "c3", "system": "crs-a", "messages": [  # test_cli's two conversations and a third
    {"role": "user", "content": "I loved Alien. More like it?"},
    {"role": "assistant", "content": "Event Horizon (1997) is a dark space horror. Want something newer?"}]}]
ASPECTS = ["relevance", "dialogue_overall"]


def _paths(tmp: Path, data_dir: Path) -> dict:
    return {"paths": {"cache_dir": str(tmp / "cache"), "data_dir": str(data_dir)}}


def _jsonl(path: Path, convs=CHAT) -> Path:
    return write_logs(path, convs)


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    """One small run kept in ``out`` (two samples per score, two instructions), read by several tests."""
    tmp = tmp_path_factory.mktemp("api")
    logs = _jsonl(tmp / "logs.jsonl")
    result = face.evaluate(logs, aspects=ASPECTS, llm="fake", out=tmp / "out", run_size="tiny",
                           **{"method.scoring.n": 2, "method.instructions.max": 2}, **_paths(tmp, data_dir))
    return tmp, logs, result


@pytest.mark.slow  # the shared run (≈ 2 s once per worker)
def test_dialogue_and_turn_scores_are_the_means_of_the_raw_samples_over_particles_and_instructions(run):
    _, _, r = run
    p = r.particles
    assert set(p["samples"].map(len)) == {2}  # method.scoring.n=2 reached the run
    assert set(p.groupby("aspect")["instruction_id"].nunique()) == {2}  # method.instructions.max=2
    # a particle's score is the mean of its samples; a turn's / dialogue's the mean over particles × instructions
    expected = p.assign(mean=p["samples"].map(lambda s: sum(s) / len(s)))
    assert all(math.isclose(a, b) for a, b in zip(expected["mean"], p["score"]))
    dial = expected[expected["aspect"] == "dialogue_overall"].groupby("conv_id")["mean"].mean()
    turn = expected[expected["aspect"] == "relevance"].groupby(["conv_id", "turn_ind"])["mean"].mean()
    got_d = r.dialogues.set_index("conv_id")["dialogue_overall"]
    got_t = r.turns.set_index(["conv_id", "turn_ind"])["relevance"]
    assert list(got_d.index) == ["c1", "c2", "c3"] and list(r.dialogues["system"]) == ["crs-a", "crs-b", "crs-a"]
    assert list(got_t.index) == [("c1", 1), ("c2", 1), ("c2", 3), ("c3", 1)]  # the system message is no turn
    for key, value in dial.items():
        assert math.isclose(got_d[key], value, abs_tol=1e-9)
    for key, value in turn.items():
        assert math.isclose(got_t[key], value, abs_tol=1e-9)
    assert set(p["dialogue_act"]) <= {"greeting", "preference elicitation", "recommendation", "goodbye", "others"}


@pytest.mark.slow  # the report's figures and `face report`: ≈ 1.5 s
def test_the_run_file_and_report_hold_the_result_and_face_report_reads_the_out_directory(run, tmp_path):
    tmp, _, r = run
    path = r.to_run_file(tmp_path / "run.json")
    records = {c["conv_id"]: c for c in json.loads(path.read_text())}
    for row in r.dialogues.itertuples():
        assert records[row.conv_id]["dial_level_pred"]["dialogue_overall"] == pytest.approx(row.dialogue_overall)
    assert path.read_text() == (tmp / "out" / "run_file.json").read_text()  # what the run wrote
    html = r.report(tmp_path / "report.html", tables=True).read_text()
    assert all(f'id="{c}"' in html for c in ("c1", "c2", "c3"))
    assert (tmp_path / "report_tables" / "worst_particles.csv").exists()
    from face.cli import main

    assert main(["report", str(tmp / "out")]) == 0  # conversations.json was written for it
    assert 'id="c3"' in (tmp / "out" / "report.html").read_text()


@pytest.mark.slow  # the shared run (≈ 2 s once per worker)
def test_lowest_particles_are_the_lowest_means_over_instructions(run):
    _, _, r = run
    p = r.particles[(r.particles["aspect"] == "dialogue_overall") & (r.particles["conv_id"] == "c2")]
    means = sorted(p.groupby(["turn_ind", "particle_ind"])["score"].mean())
    got = r.lowest_particles("c2", "dialogue_overall", k=2)
    assert list(got["score"]) == pytest.approx(means[:2])
    assert {"dialogue_act", "mention", "turn_ind"} <= set(got.columns)


@pytest.mark.slow  # two more runs: ≈ 1 s
def test_in_memory_conversations_a_dataframe_and_a_running_event_loop_give_the_file_s_scores(run, data_dir, tmp_path):
    tmp, _, r = run
    settings = {**_paths(tmp, data_dir), "method": {"scoring": {"n": 2}, "instructions": {"max": 2}}}  # = dotted
    rows = [(c["id"], m["role"], m["content"], c["system"]) for c in CHAT for m in c["messages"]]
    frame = pd.DataFrame(rows, columns=["conv_id", "role", "content", "system"])

    async def inside_a_loop():  # as in Jupyter: the call blocks, the run goes to a worker thread
        return face.evaluate(frame, aspects=ASPECTS, llm="fake", run_size="tiny", **settings)

    for got in (face.evaluate(CHAT, aspects=ASPECTS, llm="fake", run_size="tiny", **settings),
                asyncio.run(inside_a_loop())):
        pd.testing.assert_frame_equal(got.dialogues, r.dialogues)
        pd.testing.assert_frame_equal(got.turns, r.turns)
        assert got.out_dir is None and got.usage["totals"]["cache_hits"] > 0  # every answer from the cache


@pytest.mark.slow  # the shared run (≈ 2 s once per worker)
def test_meta_evaluate_equals_scipy_on_the_labels_given(run):
    _, _, r = run
    human = {"c1": 4.0, "c2": 1.0, "c3": 3.0}
    turn_human = {("c1", 1): 2.0, ("c2", 1): 0.0, ("c2", 3): 1.0, ("c3", 1): 2.0}
    labels = pd.DataFrame([(c, None, "dialogue_overall", v) for c, v in human.items()]
                          + [(c, t, "relevance", v) for (c, t), v in turn_human.items()],
                          columns=["conv_id", "turn_ind", "aspect", "label"])
    res = face.meta_evaluate(r, labels, n_boot=0, levels=["turn", "dialogue"])
    pred = r.dialogues.set_index("conv_id")["dialogue_overall"]
    want = stats.spearmanr([pred[c] for c in human], list(human.values())).statistic
    row = res[(res["aspect"] == "dialogue_overall") & (res["coefficient"] == "spearman")]
    assert row["value"].iloc[0] == pytest.approx(want) and row["n"].iloc[0] == 3
    tp = r.turns.set_index(["conv_id", "turn_ind"])["relevance"]
    want_t = stats.pearsonr([tp[k] for k in turn_human], list(turn_human.values())).statistic
    row = res[(res["aspect"] == "relevance") & (res["coefficient"] == "pearson")]
    assert row["level"].iloc[0] == "turn" and row["value"].iloc[0] == pytest.approx(want_t)
    with pytest.raises(face.DataError, match="no human label"):
        face.meta_evaluate(r)  # chat logs carry none
    with pytest.raises(face.DataError, match="not in the result"):
        face.meta_evaluate(r, labels.assign(conv_id="nope"))


@pytest.mark.slow  # three more runs and a report: ≈ 1.5 s
def test_a_rerun_into_out_resumes_and_another_input_there_is_refused_unless_overwrite(run, data_dir, capsys):
    tmp, logs, r = run
    settings = {"method.scoring.n": 2, "method.instructions.max": 2, **_paths(tmp, data_dir)}
    again = face.evaluate(logs, aspects=ASPECTS, llm="fake", out=tmp / "out", run_size="tiny", **settings)
    assert "Resuming the run" in capsys.readouterr().out
    pd.testing.assert_frame_equal(again.dialogues, r.dialogues)
    other = _jsonl(tmp / "other.jsonl", CHAT[:1])
    with pytest.raises(face.ConfigError, match="overwrite=True"):
        face.evaluate(other, aspects=ASPECTS, llm="fake", out=tmp / "out", run_size="tiny", **settings)
    replaced = face.evaluate(other, aspects=ASPECTS, llm="fake", out=tmp / "out", run_size="tiny",
                             overwrite=True, **settings)
    assert list(replaced.dialogues["conv_id"]) == ["c1"]


@pytest.mark.parametrize("call,match", [
    (lambda p: face.evaluate(p, aspects=["humour"], llm="fake"), "no aspect 'humour'"),
    (lambda p: face.evaluate(p, llm="fake", **{"method.nn": 3}), "method.nn"),
    (lambda p: face.evaluate(p, llm="fake", method={"scoring": {"n": 0}}),
     "method.scoring.n must be an integer >= 1"),
    (lambda p: face.evaluate(p, llm="fake", **{"dataset.path": "x.json"}), "conversations are the first"),
    (lambda p: face.evaluate(p, llm="fake", run_size="huge"), "run_size"),
    (lambda p: face.evaluate(p, llm="scripted --x"), "llm must name a config"),
    (lambda p: face.evaluate(p, llm="fake", limit=0), "limit must be a positive"),
    (lambda p: face.evaluate(p, llm="fake", **{"llm.api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"}),
     "llm.api_key"),
    (lambda p: face.estimate(p, llm="fake", **{"llm.headers": {"Authorization": "Bearer abcdefghijklmnop1234"}}),
     "Authorization"),
], ids=["aspect", "unknown_key", "bad_value", "own_setting", "bad_group", "bad_llm", "limit", "key", "header"])
def test_a_bad_setting_is_a_config_error_before_anything_is_written(tmp_path, call, match):
    logs = _jsonl(tmp_path / "logs.jsonl")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(face.ConfigError, match=match) as e:
        call(logs)
    assert "sk-proj-abcdef" not in str(e.value) and "abcdefghijklmnop1234" not in str(e.value)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("convs,match", [
    ([{"id": "a", "messages": [{"role": "user", "content": "hi"}]}], r"conversations \(in memory\).*no assistant"),
    ([{"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]}],
     "empty message"),
    (pd.DataFrame({"conv_id": ["a"], "text": ["hi"]}), "needs the columns role, content"),
    ([], "contains no conversation"),
])
def test_bad_in_memory_conversations_are_a_data_error_naming_them(convs, match):
    with pytest.raises(face.DataError, match=match):
        face.evaluate(convs, llm="fake")


def test_estimate_sends_nothing_and_counts_the_decomposition_samples(tmp_path, data_dir):
    server = ScriptedServer()
    with server as info:
        est = face.estimate(CHAT, aspects=["relevance"], llm="openai_compatible", run_size="tiny",
                            **{"llm.base_url": info.base_url, "llm.model": "m", "method.particles.k": 4,
                               "llm.price_input_per_mtok": 1.0}, **_paths(tmp_path, data_dir))
    assert server.log == []
    decompose = est.set_index("stage").loc["decompose"]
    assert decompose["samples"] == 4 * 4  # k=4 samples for each of the four assistant turns
    assert est.set_index("stage").loc["total", "cost_usd"] > 0


def test_a_budget_stop_is_an_exception_not_an_exit(tmp_path, data_dir):
    with pytest.raises(face.BudgetExceeded):
        face.evaluate(CHAT, aspects=["relevance"], llm="fake", run_size="tiny",
                      **{"llm.max_calls": 2}, **_paths(tmp_path, data_dir))


@pytest.mark.slow  # another run
def test_conversation_objects_carry_their_labels_to_meta_evaluate(run, data_dir):
    tmp, _, _ = run
    convs = [Conversation(c["id"], tuple(Turn(i, "USER" if m["role"] == "user" else "ASST", m["content"])
                                          for i, m in enumerate(x for x in c["messages"] if x["role"] != "system")),
                          labels={"dialogue_overall": float(k)}, system=c["system"]) for k, c in enumerate(CHAT)]
    r = face.evaluate(convs, aspects=["dialogue_overall"], llm="fake", run_size="tiny",
                      **{"method.scoring.n": 2, "method.instructions.max": 2}, **_paths(tmp, data_dir))
    res = face.meta_evaluate(r, n_boot=0, levels=["dialogue"])
    want = stats.kendalltau(r.dialogues["dialogue_overall"], [0.0, 1.0, 2.0]).statistic
    assert res[res["coefficient"] == "kendall"]["value"].iloc[0] == pytest.approx(want)


def test_import_face_loads_neither_pandas_nor_mlflow_and_names_its_api():
    code = ("import sys, face; assert 'pandas' not in sys.modules and 'mlflow' not in sys.modules; "
            "print(sorted(face.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    for name in ("evaluate", "estimate", "meta_evaluate", "Result", "ConfigError", "BudgetExceeded"):
        assert f"'{name}'" in out


@pytest.mark.slow  # a fresh interpreter: ≈ 5 s
def test_the_one_liner_runs_in_a_fresh_interpreter_from_any_directory_on_a_jsonl_file(tmp_path, data_dir):
    _jsonl(tmp_path / "LOGS.jsonl")
    env = {**os.environ, "FACE_CACHE_DIR": str(tmp_path / "cache"), "FACE_DATA_DIR": str(data_dir)}
    code = ("import face; r = face.evaluate('LOGS.jsonl', aspects=['relevance','dialogue_overall'], llm='fake', "
            "run_size='tiny'); print(r.dialogues.head())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout.split("run summary")[-1]
    assert all(c in table for c in ("c1", "c2", "c3", "dialogue_overall", "crs-b"))


@pytest.mark.slow  # the replay judge on three conversations at the paper's run size: ≈ 10 s
def test_on_crsarena_eval_replay_and_released_scores_give_reproduce_table2_s_scores(tmp_path, data_dir):
    from face.datasets.crsarena import ASPECTS as ALL
    from face.datasets.crsarena import CRSArenaEval, load_conversations
    from face.experiments.replay_table2 import compare_runs, identical_groups
    from face.methods import Inputs
    from face.pipeline.released import FaceReleased

    n, aspects = 3, ["relevance", "dialogue_overall"]
    settings = {**_paths(tmp_path, data_dir), "metaeval.n_boot": 0}
    replay = face.evaluate("crsarena_eval", aspects=aspects, llm="replay", limit=n, quiet=True,
                           **{"llm.server.process": False}, **settings)  # the judge in a thread: no start-up
    released = face.evaluate("crsarena_eval", aspects=aspects, method="face_released", limit=n, quiet=True,
                             **settings)
    convs = load_conversations(data_dir / "crsarena_eval" / "crs_arena_eval.json")[:n]
    direct = FaceReleased().predict(Inputs(CRSArenaEval(), convs, [ALL[a] for a in aspects], data_dir,
                                           tmp_path / "direct")).predictions  # what reproduce_table2 aggregates
    assert len(direct.dialogue) == n and len(replay.dialogues) == n
    assert compare_runs(released.predictions, direct, set()).empty  # every turn and dialogue score equal
    groups = {k for c, t, _ in identical_groups(data_dir) for a in aspects for k in ((a, c, t), (a, c))}
    diff = compare_runs(replay.predictions, direct, groups)
    assert (diff["reason"] != "UNEXPLAINED").all()  # differences only where one prompt reads as several particles
    assert len(diff) < len(direct.turn) // 4 and replay.correlations is not None


ASPECTS_FILE = """\
- name: explainability
  level: turn
  scale: [0, 1, 2]
  definition: Does the assistant say why it recommends what it recommends?
  levels: {0: No reason., 1: A vague reason., 2: A specific reason.}
  instructions: ["Rate how well the particle gives a reason for its recommendation (EXPLAIN-MARK)."]
"""


@pytest.mark.slow  # a run through each entry point: ≈ 2 s
def test_an_aspect_of_your_own_is_scored_with_its_definition_and_instruction_by_the_api_and_the_cli(tmp_path,
                                                                                                   data_dir):
    from face.cli import main

    spec = tmp_path / "aspects.yaml"
    spec.write_text(ASPECTS_FILE, encoding="utf-8")
    from face.testing.scripted import default_responder

    prompts = []

    def responder(body: dict) -> str:  # the scripted answers, the prompts kept
        prompts.extend(m["content"] for m in body["messages"])
        return default_responder(body)

    with ScriptedServer(responder=responder) as info:
        llm = {"llm.base_url": info.base_url, "llm.model": "m", "dataset.aspects_file": str(spec)}
        r = face.evaluate(CHAT, aspects=["explainability", "dialogue_overall"], llm="openai_compatible", quiet=True,
                          run_size="tiny", **llm, **_paths(tmp_path, data_dir))
        assert main(["evaluate", str(_jsonl(tmp_path / "logs.jsonl")), "--aspects", "explainability", "--llm",
                     "openai_compatible", "--out", str(tmp_path / "out"), "--yes", "--set", "run_size=tiny",
                     *[a for k, v in llm.items() for a in ("--set", f"{k}={v}")],
                     "--set", f"paths.cache_dir={tmp_path / 'cache'}", "--set", f"paths.data_dir={data_dir}"]) == 0
    assert r.turns["explainability"].between(0, 2).all() and len(r.turns) == 4
    assert set(r.particles.loc[r.particles["aspect"] == "explainability", "instruction_id"]) == {"explainability-1"}
    assert any("EXPLAIN-MARK" in p and "Does the assistant say why" in p for p in prompts)
    run = json.loads((tmp_path / "out" / "run_file.json").read_text())
    assert "explainability" in run[0]["turns"][0]["turn_level_pred"]
    assert "explainability" in (tmp_path / "out" / "report.html").read_text()  # the report knows its scale
    spec.write_text(ASPECTS_FILE.replace("name: explainability", "name: relevance"), encoding="utf-8")
    with pytest.raises(face.ConfigError, match="one of CRSArena-Eval's aspects"):
        face.evaluate(CHAT, aspects=["relevance"], llm="fake", **{"dataset.aspects_file": str(spec)})


@pytest.mark.slow  # imports MLflow for the scorers' reference
def test_the_api_reference_in_docs_is_rendered_from_the_current_docstrings():
    out = subprocess.run([sys.executable, "scripts/api_docs.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow  # the shared run (≈ 2 s once per worker)
def test_a_selection_setting_narrows_every_table_to_the_conversations_it_keeps(run, data_dir):
    tmp, logs, r = run
    got = face.evaluate(logs, aspects=ASPECTS, llm="fake", run_size="tiny", quiet=True,
                        **{"method.scoring.n": 2, "method.instructions.max": 2, "dataset.systems": ["crs-a"]},
                        **_paths(tmp, data_dir))
    assert list(got.dialogues["conv_id"]) == ["c1", "c3"] and set(got.turns["conv_id"]) == {"c1", "c3"}
    keep = r.dialogues[r.dialogues["system"] == "crs-a"].reset_index(drop=True)
    pd.testing.assert_frame_equal(got.dialogues, keep)  # the same scores (cached answers), fewer rows
