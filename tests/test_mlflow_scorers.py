"""FACE's aspects as MLflow scorers (face.integrations.mlflow): traces become the conversation a hand-written chat log
would be, each scorer's Feedback is the FACE score of ``face.evaluate`` on that hand-written log, and the notebook
example (notebooks/mlflow_scorers.ipynb) leaves one FACE assessment per session per dialogue-level aspect in the
tracking store."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import shutil
from pathlib import Path

import pytest

import face

ROOT = Path(__file__).resolve().parents[1]

# (session, [(user message, assistant reply)])
SESSIONS = {
    "s1": [("Any heist movies?", "Try Heat (1995). Do you like older films?"),
           ("Yes, older is fine. Thanks!", "Enjoy Heat! Goodbye.")],
    "s2": [("Something funny please", "Have you seen Airplane! (1980)?")],
}
SETTINGS = {"run_size": "tiny", "method.scoring.n": 2}


@pytest.mark.parametrize("inputs,outputs,user,assistant", [
    ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "old"},
                   {"role": "assistant", "content": "a"}, {"role": "user", "content": "new"}]},
     "reply", "new", "reply"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
     {"choices": [{"message": {"role": "assistant", "content": "from a completion"}}]}, "a\nb", "from a completion"),
    ({"query": "q", "top_k": 3}, {"response": "r", "latency": 1.0}, "q", "r"),
    ({"user_id": 7, "utterance": "only string"}, {"messages": [{"role": "assistant", "content": "last"}]},
     "only string", "last"),
    ("plain", {"message": {"role": "assistant", "content": "in a message"}}, "plain", "in a message"),
    ({"a": "x", "b": "y"}, None, None, None),  # two strings, no known key: not guessed
])
def test_a_trace_s_user_and_assistant_messages_follow_the_documented_rules(inputs, outputs, user, assistant):
    from face.integrations.traces import assistant_text, user_text

    assert user_text(inputs) == user and assistant_text(outputs) == assistant


# ---------------------------------------------------------------- with a tracking store (MLflow: slow to set up)
@pytest.fixture(scope="module")
def store(tmp_path_factory, data_dir, mlflow_store):
    """SESSIONS traced into a sqlite store, one trace per turn, plus a trace with nothing FACE can read."""
    import mlflow

    tmp = tmp_path_factory.mktemp("mlflow")
    shutil.copyfile(mlflow_store, tmp / "mlflow.db")  # an empty store, without migrating a new one
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")
    exp = mlflow.set_experiment("face-scorers-test").experiment_id

    @mlflow.trace
    def turn(messages: list, session_id: str, reply: str) -> str:
        mlflow.update_current_trace(session_id=session_id, metadata={"face.system": "toy"})
        return reply

    @mlflow.trace
    def opaque(x: int) -> int:
        return x

    ids: dict[str, list[str]] = {}
    for sid, turns in SESSIONS.items():
        for user, reply in turns:
            turn([{"role": "user", "content": user}], session_id=sid, reply=reply)
            ids.setdefault(sid, []).append(mlflow.get_last_active_trace_id())
    opaque(3)
    ids["opaque"] = [mlflow.get_last_active_trace_id()]
    mlflow.flush_trace_async_logging()
    traces = {sid: [mlflow.get_trace(t) for t in tids] for sid, tids in ids.items()}
    paths = {"paths": {"cache_dir": str(tmp / "cache"), "data_dir": str(data_dir)}}
    yield exp, traces, paths
    mlflow.set_tracking_uri(previous)


def _by_hand(sid: str) -> dict:
    return {"id": sid, "system": "toy", "messages": [m for user, reply in SESSIONS[sid] for m in (
        {"role": "user", "content": user}, {"role": "assistant", "content": reply})]}


@pytest.mark.slow
def test_session_and_turn_scorers_give_face_evaluate_s_scores_of_the_conversation_written_by_hand(store):
    from face.integrations.mlflow import FaceSessionScorer, FaceTurnScorer

    _, traces, paths = store
    scorers = face.integrations.mlflow.scorers(["relevance", "dialogue_overall"], llm="fake", **SETTINGS,
                                               **paths)
    assert [(type(s), s.name) for s in scorers] == [(FaceTurnScorer, "face_relevance"),
                                                    (FaceSessionScorer, "face_dialogue_overall")]
    want = face.evaluate([_by_hand("s1")], aspects=["relevance", "dialogue_overall"], llm="fake", quiet=True,
                         **SETTINGS, **paths)
    session = list(traces["s1"])
    random.Random(0).shuffle(session)  # MLflow hands a session over in the order of its data, not of the turns
    dial = scorers[1](session=session)
    assert dial.value == pytest.approx(want.dialogues["dialogue_overall"].iloc[0])
    assert dial.source.source_type == "LLM_JUDGE" and dial.source.source_id == "scripted-model"
    lowest = want.lowest_particles("s1", "dialogue_overall", k=3)
    assert f"{lowest['dialogue_act'][0]}: \u201c{lowest['mention'][0]}\u201d \u2192 {lowest['score'][0]:.2f}" \
        in dial.rationale
    second = scorers[0](trace=traces["s1"][1])  # the second turn, its session read from the store
    assert second.value == pytest.approx(want.turns.set_index("turn_ind").loc[3, "relevance"])
    assert second.metadata["face.turn_ind"] == "3" and "assistant turn 2" in second.rationale


@pytest.mark.slow
def test_a_conversation_is_evaluated_once_for_every_scorer_and_turn(store, monkeypatch):
    import face.api

    _, traces, paths = store
    calls = []
    real = face.api.evaluate
    monkeypatch.setattr(face.api, "evaluate", lambda *a, **k: calls.append(a) or real(*a, **k))
    turn, dial = face.integrations.mlflow.scorers(["relevance", "dialogue_overall"], llm="fake", **SETTINGS,
                                                  **paths)
    for t in traces["s1"]:
        turn(trace=t)
    dial(session=traces["s1"])
    dial(session=traces["s2"])
    assert len(calls) == 2  # s1 once (two turns, two aspects), s2 once


@pytest.mark.slow
def test_a_trace_with_neither_message_is_a_data_error_naming_it_and_bad_settings_fail_at_build(store):
    _, traces, paths = store
    (dial,) = face.integrations.mlflow.scorers(["dialogue_overall"], llm="fake", **SETTINGS, **paths)
    bad = traces["opaque"][0]
    with pytest.raises(face.DataError, match=f"{bad.info.trace_id}.*neither a user message nor an assistant reply"):
        dial(session=[bad])
    with pytest.raises(face.ConfigError, match="humour"):
        face.integrations.mlflow.scorers(["humour"], llm="fake")
    with pytest.raises(face.ConfigError, match="method.scoring.n must be"):
        face.integrations.mlflow.scorers(llm="fake", **{"method.scoring.n": 0})


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # a kernel, MLflow, three FACE runs and MLflow's own judge: ≈ 20 s
def test_the_notebook_example_leaves_one_face_assessment_per_session_per_dialogue_aspect(tmp_path, monkeypatch,
                                                                                         data_dir, mlflow_store):
    import mlflow

    shutil.copyfile(mlflow_store, tmp_path / "mlflow.db")
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("FACE_MLFLOW_URI", db)
    monkeypatch.setenv("FACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FACE_DATA_DIR", str(data_dir))
    nb = _runner().execute(ROOT / "notebooks" / "mlflow_scorers.ipynb", tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and not [o for c in code for o in c.outputs
                                                         if o.output_type == "error"]
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(db)
    try:
        experiment = mlflow.get_experiment_by_name("face-toy-recommender")
        exp = experiment.experiment_id
        (run,) = mlflow.search_runs([exp], output_format="list")
        traces = mlflow.search_traces(locations=[exp], run_id=run.info.run_id, return_type="list")
    finally:
        mlflow.set_tracking_uri(previous)
    sessions = {t.info.trace_metadata["mlflow.trace.session"] for t in traces}
    found: dict[str, list] = {}
    for t in traces:
        for a in t.info.assessments:
            found.setdefault(a.name, []).append((t.info.trace_metadata["mlflow.trace.session"], a))
    assert len(traces) == 7 and len(sessions) == 3  # the notebook's 3 conversations, 7 turns
    dial = found["face_dialogue_overall"]
    assert sorted(s for s, _ in dial) == sorted(sessions)  # one per session
    assert len(found["face_relevance"]) == 7  # one per turn
    assert sorted(s for s, _ in found["conversation_completeness"]) == sorted(sessions)  # MLflow's own, beside
    for _, a in dial + found["face_relevance"]:
        assert a.source.source_type == "LLM_JUDGE" and a.source.source_id == "scripted-model"
        assert isinstance(a.value, float) and "Lowest-scoring particles" in a.rationale
    assert os.environ.get("FACE_MLFLOW_URI") == db
    # the traces' artifacts beside the store, not in notebooks/mlruns (the kernel's working directory)
    assert experiment.artifact_location == (tmp_path / "mlruns").as_uri()
    assert run.info.run_name.startswith("face-scorers vs conversation_completeness ")  # named, not random
    (table,) = [o["data"]["text/plain"] for c in code if "shown[[" in c.source for o in c.outputs if "data" in o]
    assert "0–4" in table and "0–2" in table and "yes / no" in table  # each value with its scale
    assert not re.search(r"\d\.\d{3,}", table), table  # rounded: no 10-decimal values


@pytest.mark.slow
def test_an_aspect_of_your_own_becomes_a_scorer_at_its_level_with_its_scale(store, tmp_path):
    from test_api import ASPECTS_FILE

    from face.integrations.mlflow import FaceSessionScorer

    _, traces, paths = store
    spec = tmp_path / "aspects.yaml"
    spec.write_text(ASPECTS_FILE.replace("level: turn", "level: dialogue").replace("[0, 1, 2]", "[1, 2, 3, 4, 5]")
                    .replace("{0: No reason., 1: A vague reason., 2: A specific reason.}", "{}"), encoding="utf-8")
    (s,) = face.integrations.mlflow.scorers(["explainability"], llm="fake", **SETTINGS, **paths,
                                            **{"dataset.aspects_file": str(spec)})
    assert isinstance(s, FaceSessionScorer) and s.name == "face_explainability"
    feedback = s(session=traces["s2"])
    assert 1 <= feedback.value <= 5 and "on a 1\u20135 scale" in feedback.rationale
