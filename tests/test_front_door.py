"""One front door (issue 29 item 1, issue 34 items 1 and 4): ``scripts/run.py``, ``face evaluate`` and
``face.evaluate`` each build one ``RunRequest`` for ``face.runner.run``; an output location of another run is refused
whatever override spells it; a missing API key stops the run before anything is sent or written; a misspelled
config name lists the valid ones, closest first; the API's own settings and Hydra's are refused in every spelling;
``face.Result`` is built from the run's typed result, not read back from its files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import face
from face.testing.scripted import ScriptedServer

sys.path.insert(0, str(Path(__file__).parent))

from helpers import write_logs
from reliability import refused, run

CHAT = [{"id": "c1", "system": "crs-a", "messages": [
            {"role": "user", "content": "Any good heist movies?"},
            {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"}]}]
TINY = {"run_size": "tiny", "dataset.limit": 1, "metaeval.n_boot": 0}


def _jsonl(path: Path, convs=CHAT) -> Path:
    return write_logs(path, convs)


def _victim(d: Path) -> dict[Path, bytes]:
    """Another run's directory (its ownership marker, results and usage): its bytes, to check nothing changed."""
    d.mkdir(parents=True, exist_ok=True)
    (d / ".face-run.json").write_text(json.dumps({"owner": {"settings": "0" * 64}}))
    for name in ("run_file.json", "llm_usage.json", "cost_estimate.csv", "report.html"):
        (d / name).write_text(f"{name} of another run\n")
    return {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _files(d: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}


@pytest.fixture(autouse=True)
def _absolute_mirror(monkeypatch, mirror):
    monkeypatch.setenv("FACE_DATA_MIRROR", str(mirror))


# ---------------------------------------------------------------- one runner function
@pytest.mark.slow  # three entry points in-process: ≈ 3 s
def test_each_entry_point_sends_one_run_request_to_face_runner_run(tmp_path, monkeypatch, data_dir):
    import face.runner
    from face.runner import RunRequest

    seen: list[tuple] = []

    def spy(cfg, request):
        seen.append((cfg, request))
        raise face.ConfigError("spied: the runner was called")

    monkeypatch.setattr(face.runner, "run", spy)
    logs = _jsonl(tmp_path / "logs.jsonl")
    script = run("run.py", ["experiment=crsarena_main", "llm=fake", "tracking=none"], tmp_path, monkeypatch)
    cli = run("face", ["evaluate", str(logs), "--llm", "fake", "--out", str(tmp_path / "o")], tmp_path,
              monkeypatch)
    with pytest.raises(face.ConfigError, match="spied"):
        face.evaluate(logs, llm="fake", out=tmp_path / "p")
    assert refused(script, "spied") == [] and refused(cli, "spied") == []
    assert [type(r) for _, r in seen] == [RunRequest] * 3
    assert seen[0][1].job_dir is not None and seen[0][0].task_name == "crsarena_main"  # a Hydra job
    assert (seen[1][1].out_name, seen[1][1].out) == ("--out", tmp_path / "o")
    assert (seen[2][1].out_name, seen[2][1].out) == ("out", tmp_path / "p")
    assert {cfg.runner for cfg, _ in seen} == {"face.experiments.evaluate"}  # one experiment's code, composed


@pytest.mark.parametrize("value", ["false", "False", 0, 1, None, "yes"])
def test_overwrite_that_is_not_a_bool_is_refused_before_anything_is_written(tmp_path, value):
    out = tmp_path / "out"
    with pytest.raises(face.ConfigError, match="overwrite must be True or False"):
        face.evaluate(_jsonl(tmp_path / "logs.jsonl"), llm="fake", out=out, overwrite=value)
    assert not out.exists()


# ---------------------------------------------------------------- every spelling of an output location
API_SPELLINGS = {
    "++paths.output_dir": lambda v: {"++paths.output_dir": str(v)},
    "+paths.output_dir": lambda v: {"+paths.output_dir": str(v)},
    "paths.output_dir": lambda v: {"paths.output_dir": str(v)},
    "nested paths": lambda v: {"paths": {"output_dir": str(v)}},
    "++report.out_dir": lambda v: {"++report.out_dir": str(v)},
    "report.out_dir": lambda v: {"report.out_dir": str(v)},
    "nested report": lambda v: {"report": {"out_dir": str(v)}},
    "hydra.run.dir": lambda v: {"hydra.run.dir": str(v)},
    "++hydra.run.dir": lambda v: {"++hydra.run.dir": str(v)},
}


@pytest.mark.parametrize("spelling", list(API_SPELLINGS))
def test_the_api_refuses_any_spelling_of_another_output_location_and_changes_nothing(spelling, tmp_path):
    victim = tmp_path / "victim"
    before = _victim(victim)
    with pytest.raises(face.ConfigError, match="out="):
        face.evaluate(_jsonl(tmp_path / "logs.jsonl"), llm="fake", out=tmp_path / "mine",
                      **API_SPELLINGS[spelling](victim))
    assert _files(victim) == before and not (tmp_path / "mine").exists()


@pytest.mark.parametrize("name", ["+hydra.job.env_set.FACE_X", "++hydra.job.env_set.FACE_X", "~hydra.job.env_set",
                                  "hydra.verbose", "hydra/launcher", "++hydra/job_logging", "hydra"])
def test_hydra_s_own_settings_are_refused_through_the_api_in_every_prefix_form(name, tmp_path):
    value = "submitit_local" if "/" in name else "1"
    for call in (face.evaluate, face.estimate):
        with pytest.raises(face.ConfigError, match="runs no Hydra job"):
            call(_jsonl(tmp_path / "logs.jsonl"), llm="fake", **{name: value})
    with pytest.raises(face.ConfigError, match="runs no Hydra job"):
        face.api.check_settings(llm="fake", **{name: value})


@pytest.mark.slow  # a refused run through the runner: ≈ 1 s each
@pytest.mark.parametrize("spelling", ["++paths.output_dir", "paths.output_dir", "report as a dict", "report.out_dir",
                                      "++report.out_dir", "interpolated"])
def test_the_runner_claims_the_locations_the_composed_config_names_not_their_spelling(spelling, tmp_path, data_dir):
    """Below the API's own refusals: a request whose overrides name another run's directory (any spelling, even an
    interpolation) is refused by the claim, with nothing changed."""
    from helpers import run_overrides

    victim, mine = tmp_path / "victim", tmp_path / "mine"
    before = _victim(victim)
    v = f"'{victim}'"
    key = spelling.lstrip("+")
    over = ([f"+victim={v}", "paths.output_dir=${victim}"] if spelling == "interpolated" else [f"{spelling}={v}"]
            if key == "paths.output_dir" else [f"paths.output_dir='{mine}'", f"{spelling}={v}"])
    base = ["experiment=crsarena_main", "llm=fake", "tracking=none", "run_size=tiny", "dataset=chat_logs",
            f"dataset.path='{_jsonl(tmp_path / 'logs.jsonl')}'", f"paths.data_dir='{data_dir}'",
            f"paths.cache_dir='{tmp_path / 'cache'}'"]
    if spelling == "report as a dict":
        over = [f"paths.output_dir='{mine}'", f"report={{out_dir:{v}}}"]
    with pytest.raises(face.ConfigError, match="another run's results"):
        run_overrides(base + over)
    assert _files(victim) == before and not mine.exists()


# ---------------------------------------------------------------- credentials
def test_api_key_names_the_missing_variable_and_a_keyless_server_needs_none(monkeypatch):
    from face.llm import LLMConfig

    monkeypatch.delenv("FACE_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(face.ConfigError, match="FACE_TEST_NO_SUCH_KEY is not set"):
        LLMConfig(api_key_env="FACE_TEST_NO_SUCH_KEY").api_key()
    monkeypatch.setenv("FACE_TEST_NO_SUCH_KEY", " ")
    with pytest.raises(face.ConfigError, match="FACE_TEST_NO_SUCH_KEY is not set"):
        LLMConfig(api_key_env="FACE_TEST_NO_SUCH_KEY").api_key()
    monkeypatch.setenv("FACE_TEST_NO_SUCH_KEY", "justlettersnotakeyshape")
    assert LLMConfig(api_key_env="FACE_TEST_NO_SUCH_KEY").api_key() == "justlettersnotakeyshape"
    assert LLMConfig(api_key_env=None).api_key() == "not-needed"


@pytest.mark.slow  # a scripted server and a refused run
def test_the_api_without_its_key_stops_before_anything_is_sent_or_written_and_estimates_without_one(
        tmp_path, monkeypatch, data_dir):
    monkeypatch.delenv("FACE_TEST_NO_SUCH_KEY", raising=False)
    server = ScriptedServer()
    with server as info:
        llm = {"llm.base_url": info.base_url, "llm.model": "m", "llm.api_key_env": "FACE_TEST_NO_SUCH_KEY",
               "paths.data_dir": str(data_dir), "paths.cache_dir": str(tmp_path / "cache"), "run_size": "tiny"}
        with pytest.raises(face.ConfigError, match="FACE_TEST_NO_SUCH_KEY is not set"):
            face.evaluate(CHAT, aspects="relevance", llm="openai_compatible", out=tmp_path / "out", **llm)
        with pytest.raises(face.ConfigError, match="FACE_TEST_NO_SUCH_KEY"):
            face.integrations.mlflow.scorers(aspects="relevance", llm="openai_compatible", **llm)
        est = face.estimate(CHAT, aspects="relevance", llm="openai_compatible", quiet=True, **llm)  # needs no key
    assert server.log == [] and not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    assert est.set_index("stage").loc["decompose", "samples"] > 0


@pytest.mark.slow  # through the command line and scripts/run.py, in-process
@pytest.mark.parametrize("entry", ["face", "run.py"])
def test_without_openai_api_key_both_commands_exit_2_naming_it_with_no_request_and_no_output_dir(entry, tmp_path,
                                                                                                 monkeypatch, data_dir):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = ScriptedServer()
    with server as info:
        if entry == "face":
            argv = ["evaluate", str(_jsonl(tmp_path / "logs.jsonl")), "--llm", "openai", "--yes", "--out",
                    str(tmp_path / "out"), "--set", f"llm.base_url={info.base_url}"]
        else:
            argv = ["experiment=crsarena_main", "llm=openai", f"llm.base_url={info.base_url}", "dataset.limit=1",
                    f"paths.data_dir={data_dir}"]
        o = run(entry, argv, tmp_path, monkeypatch)
    assert refused(o, "OPENAI_API_KEY", "not set") == [], o.err[-1500:]
    assert server.log == []  # nothing sent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs.jsonl"][: 1 if entry == "face" else 0]


# ---------------------------------------------------------------- errors that say what is valid
@pytest.mark.parametrize("kwargs,first", [({"llm": "opnai"}, "openai"), ({"method": "face_relased"}, "face_released"),
                                          ({"run_size": "tinny"}, "tiny")])
def test_a_misspelled_config_name_through_the_api_lists_the_valid_ones_closest_first(kwargs, first, tmp_path):
    llm = kwargs.pop("llm", "fake")
    with pytest.raises(face.ConfigError, match=rf"no such \w+ .*valid, closest first: {first}, ") as e:
        face.evaluate(_jsonl(tmp_path / "logs.jsonl"), llm=llm, **kwargs)
    assert "base" not in str(e.value).split("closest first:")[1].split(", ")  # llm/base.yaml is no choice


def test_a_misspelled_dataset_name_lists_the_datasets_closest_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(face.DataError, match="closest first: crsarena_eval, "):
        face.evaluate("crsarena_evl", llm="fake")


@pytest.mark.slow  # through the command line and scripts/run.py, in-process
@pytest.mark.parametrize("entry,argv,first", [
    ("run.py", ["experiment=reproduce_tabel2"], "experiment=reproduce_tabel2: no such experiment "),
    ("run.py", ["experiment=crsarena_main", "dataset=crsarena_evl"], "closest first: crsarena_eval, "),
    ("run.py", ["experiment=crsarena_main", "method=fce"], "closest first: face, "),
    ("run.py", ["experiment=crsarena_main", "llm=opnai"], "closest first: openai, "),
    ("face", ["--llm", "opnai"], "closest first: openai, "),
    ("face", ["--set", "method=face_relased"], "closest first: face_released, "),
])
def test_a_misspelled_config_name_on_the_command_line_lists_the_valid_ones_closest_first(entry, argv, first, tmp_path,
                                                                                         monkeypatch):
    if entry == "face":
        argv = ["evaluate", str(_jsonl(tmp_path / "logs.jsonl")), "--out", str(tmp_path / "out"), *argv]
    o = run(entry, argv, tmp_path, monkeypatch)
    assert refused(o, first) == [], o.err[-1000:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "outputs").exists()


# ---------------------------------------------------------------- face.Result from the typed result
@pytest.mark.slow  # a run on the scripted server
def test_the_result_is_built_from_the_run_not_read_back_from_its_usage_estimate_and_settings_files(
        tmp_path, monkeypatch, data_dir):
    import pandas as pd

    import face.report.diagnostic_report as diagnostic_report

    read_back: list[str] = []
    real_read_text, real_read_csv = Path.read_text, pd.read_csv

    def read_text(self, *a, **k):
        if self.name in ("llm_usage.json", "run_settings.json"):
            read_back.append(self.name)
        return real_read_text(self, *a, **k)

    def read_csv(path, *a, **k):
        if str(path).endswith("cost_estimate.csv"):
            read_back.append("cost_estimate.csv")
        return real_read_csv(path, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(pd, "read_csv", read_csv)
    monkeypatch.setattr(diagnostic_report, "read_run_settings", lambda p: read_back.append(p.name) or {})
    r = face.evaluate(CHAT, aspects="relevance", llm="fake", quiet=True, run_size="tiny",
                      **{"paths.data_dir": str(data_dir), "paths.cache_dir": str(tmp_path / "cache")})
    assert read_back == []
    assert r.usage["totals"]["http_requests"] > 0 and r.llm == "scripted-model"
    assert r.estimate.set_index("stage").loc["total", "samples"] > 0
    assert set(r.settings["instructions"]) == {"relevance"} and r.settings["llm"]["backend"] == "scripted"
