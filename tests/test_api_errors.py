"""Every failure of the Python API is a documented exception (issue 31 items 2 and 3): face.evaluate, face.estimate,
face.meta_evaluate, the Result's methods and the MLflow scorers, driven with a wrong type (or value) for every
argument, raise ConfigError / DataError (or, where a wrong value still makes a valid run, a documented stop: never
TypeError, ValueError, AttributeError, UnicodeEncodeError, FileNotFoundError, IsADirectoryError)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import face

pytestmark = pytest.mark.slow  # ≈ 100 calls, most composed and refused: ≈ 40 s

CHAT = [{"id": "c1", "system": "crs-a", "messages": [
            {"role": "user", "content": "Any good heist movies?"},
            {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"}]},
        {"id": "c2", "system": "crs-b", "messages": [
            {"role": "user", "content": "Something funny please"},
            {"role": "assistant", "content": "Have you seen Airplane! (1980)?"}]}]
DOCUMENTED = (face.ConfigError, face.DataError, face.BudgetExceeded, face.LLMCallError, face.LLMRequestRefused)
WRONG = [5, 1.5, True, object(), b"bytes", [5], {"a": 1}, math.nan]  # wrong for (almost) every argument


def _documented(call) -> BaseException | None:
    """Call; None if it returned, else the exception, which must be a documented one."""
    try:
        call()
    except DOCUMENTED as e:
        return e
    except Exception as e:  # pragma: no cover - what this test exists to catch
        pytest.fail(f"{type(e).__name__} escaped: {e}")
    return None


@pytest.fixture(scope="module")
def settings(tmp_path_factory, data_dir) -> dict:
    tmp = tmp_path_factory.mktemp("api_errors")
    # a wrong value that a run still accepts stops at the first LLM request (llm.max_calls=0: BudgetExceeded)
    return {"run_size": "tiny", "paths.data_dir": str(data_dir), "paths.cache_dir": str(tmp / "cache"),
            "llm.max_calls": 0, "quiet": True}


@pytest.fixture(scope="module")
def result(tmp_path_factory, data_dir) -> face.Result:
    tmp = tmp_path_factory.mktemp("api_errors_result")
    return face.evaluate(CHAT, aspects=["relevance", "dialogue_overall"], llm="fake", quiet=True,
                         run_size="tiny", **{"paths.data_dir": str(data_dir), "paths.cache_dir": str(tmp / "cache")})


ARGUMENTS = {  # name -> wrong values (beside WRONG)
    "conversations": [None, "", [None], [{"id": "x", "messages": "hi"}], [{"id": "x", "messages": [
        {"role": "user", "content": "\ud800"}, {"role": "assistant", "content": "ok"}]}], pd.DataFrame({"a": [1]})],
    "aspects": ["", ["humour"], [None], {"relevance": 1}],
    "llm": [None, "", "scripted --x", "opnai"],
    "out": ["", "/proc/face-x"],
    "overwrite": ["false", None, 0],
    "limit": ["1", 0, -1],
    "mlflow": ["yes", None],
    "quiet": ["yes", None],
}
VALID = {"overwrite": True, "mlflow": True, "quiet": True, "limit": 5}  # WRONG's values that are right for them
SETTINGS = [{"method": 5}, {"method": {"scoring": {"n": "3"}}}, {"method.scoring.n": object()},
            {"llm.temperature": "hot"}, {"run_size": "huge"}, {"paths": {}}, {"llm.timeout_s": [1]}]


EVALUATE_ONLY = ("out", "overwrite", "mlflow")  # face.estimate writes nothing and tracks nothing


@pytest.mark.parametrize(("call", "name"), [("evaluate", n) for n in ARGUMENTS]
                         + [("estimate", n) for n in ARGUMENTS if n not in EVALUATE_ONLY])
def test_a_wrong_argument_to_evaluate_or_estimate_is_a_documented_exception(call, name, settings):
    fn = getattr(face, call)
    base = {"conversations": CHAT, "aspects": "relevance", "llm": "fake"}
    for value in [*WRONG, *ARGUMENTS[name]]:
        if value is VALID.get(name):
            continue  # a valid value (mlflow=True would also track into the project's store)
        kwargs = {**base, **settings, name: value}
        conv = kwargs.pop("conversations")
        got = _documented(lambda kw=kwargs, c=conv: fn(c, **kw))
        assert got is not None, f"{call}({name}={value!r}) was accepted"
        if name not in ("conversations", "aspects"):  # the argument's own type check names it
            assert isinstance(got, (face.ConfigError, face.DataError)), (name, value, got)


@pytest.mark.parametrize("extra", SETTINGS, ids=lambda s: next(iter(s)))
def test_a_wrong_setting_is_a_config_error(extra, settings):
    for fn in (face.evaluate, face.estimate):
        with pytest.raises(face.ConfigError):
            fn(CHAT, aspects="relevance", llm="fake", **{**settings, **extra})


def test_a_lone_surrogate_in_memory_is_a_data_error_naming_the_input(settings):
    bad = [{"id": "x", "messages": [{"role": "user", "content": "hi \ud800"}, {"role": "assistant", "content": "k"}]}]
    with pytest.raises(face.DataError, match=r"conversations \(in memory\)"):
        face.evaluate(bad, llm="fake", **settings)


META = {
    "result": [None, 5, "result", CHAT],
    "labels": [5, object(), "/no/such/labels.json", pd.DataFrame({"x": [1]})],
    "levels": [5, None, ["turn", 5], "nope", []],
    "n_boot": ["10", -1, 1.5, True, None],
    "seed": ["abc", 1.5, None, True],
    "confidence": ["0.9", 2, 0, math.nan, math.inf, None, True],
}


@pytest.mark.parametrize("name", list(META))
def test_a_wrong_argument_to_meta_evaluate_is_a_documented_exception(name, result):
    labels = pd.DataFrame({"conv_id": ["c1", "c2"], "aspect": ["dialogue_overall"] * 2, "label": [1.0, 3.0]})
    kwargs = {"labels": labels, "n_boot": 0}
    for value in META[name]:
        if name == "result":
            got = _documented(lambda v=value: face.meta_evaluate(v, **kwargs))
        else:
            got = _documented(lambda v=value: face.meta_evaluate(result, **{**kwargs, name: v}))
        assert isinstance(got, (face.ConfigError, face.DataError)), (name, value, got)
    assert len(face.meta_evaluate(result, **kwargs))  # the valid call itself runs


@pytest.mark.parametrize("rows,match", [
    ([("c1", None, "dialogue_overall", "good")], "label 'good' is not a number"),
    ([("c1", "x", "relevance", 1.0)], "turn_ind 'x' is not a number"),
    ([("c1", 1.5, "relevance", 1.0)], "turn_ind 1.5 is not an integer"),
    ([("c1", None, "humour", 1.0)], "aspect 'humour' is not one of the result's"),
    ([("c1", None, "interestingness", 1.0)], "aspect 'interestingness' is not one of the result's"),
    ([("c9", None, "dialogue_overall", 1.0)], "not in the result"),
])
def test_bad_labels_are_a_data_error_naming_the_row(rows, match, result):
    labels = pd.DataFrame(rows, columns=["conv_id", "turn_ind", "aspect", "label"])
    with pytest.raises(face.DataError, match=match):
        face.meta_evaluate(result, labels, n_boot=0)


def test_the_result_s_methods_refuse_wrong_arguments(result, tmp_path):
    a_dir = tmp_path / "d"
    a_dir.mkdir()
    calls = [lambda p=p: result.to_run_file(p) for p in (5, None, "", a_dir, "/proc/face-x/run.json", b"x.json")]
    calls += [lambda p=p: result.report(p) for p in (5, None, "", a_dir, "/proc/face-x.html")]
    calls += [lambda: result.report(tmp_path / "r.html", tables="yes")]
    calls += [lambda kw=kw: result.lowest_particles(**{"conv_id": "c1", "aspect": "relevance", **kw}) for kw in (
        {"aspect": 5}, {"aspect": "humour"}, {"conv_id": None}, {"conv_id": 1.5}, {"turn_ind": "x"},
        {"turn_ind": 1.5}, {"k": "3"}, {"k": 0}, {"k": None})]
    for call in calls:
        got = _documented(call)
        assert isinstance(got, face.ConfigError), got
    assert result.to_run_file(tmp_path / "run.json").exists()  # and valid ones work
    assert len(result.lowest_particles("c1", "relevance", k=1)) == 1


def test_the_mlflow_scorers_refuse_wrong_arguments(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    # scorers() checks the settings: the cache directory too (the project's own data/cache/llm database, were it
    # not pointed here: opening it changes its -shm file while the reliability cases watch the project tree)
    monkeypatch.setenv("FACE_CACHE_DIR", str(tmp_path / "cache"))
    from face.integrations.mlflow import FaceSessionScorer, scorers
    from face.integrations.traces import conversation

    calls = [lambda: scorers(quiet=True), lambda: scorers(out="x"), lambda: scorers(prefix=5, llm="fake")]
    calls += [lambda v=v: scorers(aspects=v, llm="fake") for v in (5, [5], "humour", {"a": 1})]
    calls += [lambda v=v: scorers(llm=v) for v in (5, None, "opnai")]
    calls += [lambda v=v: scorers(llm="fake", **{"method.scoring.n": v}) for v in ("3", object(), 0)]
    calls += [lambda v=v: conversation(v) for v in (5, None, "str", ["str"], [5], [object()], [])]
    session = FaceSessionScorer(name="s", aspect="dialogue_overall")  # not built by scorers(): no engine
    calls += [lambda: session(session=[])]
    built = {s.aspect: s for s in scorers(aspects=["relevance", "dialogue_overall"], llm="fake")}
    calls += [lambda v=v: built["dialogue_overall"](session=v) for v in (["str"], 5, None)]
    calls += [lambda v=v: built["relevance"](trace=v) for v in ("str", 5, None)]
    for call in calls:
        got = _documented(call)
        assert isinstance(got, (face.ConfigError, face.DataError)), got
