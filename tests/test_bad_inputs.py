"""Issue 9, acceptance: every malformed or hostile input gives one clear line naming the file and record (or
the setting), exit code 2, no traceback, nothing in results/, no run directory and no MLflow run.

The loaders are checked in-process (fast), every bad file; a file of each kind (CLI_FILES) and every bad setting
go through the real CLI's entry point, ``scripts/run.py``'s ``cli()``, in this process (tests/reliability.py: its
exit code, stderr and every file changed outside the case's temp dir), and one case also as its own process, which
must exit 2 with the same line (the process's exit path: ``run_cli``). Marked slow."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from face.data.schema import ASSISTANT, Conversation, Turn
from face.datasets.crsarena import load_conversations
from face.errors import DataError
from face.experiments.common import check_utterances
from face.runfile import read_run_file

sys.path.insert(0, str(Path(__file__).parent))
from reliability import run as run_in_process

ROOT = Path(__file__).resolve().parents[1]

GOOD = {"conv_id": "kbrd_redial_x", "dialogue": [
    {"turn_ind": 0, "role": "USER", "utterance": "hi, any thriller?"},
    {"turn_ind": 1, "role": "ASST", "utterance": "Try Heat (1995).", "turn_level_aggregated": {"relevance": 2}},
    {"turn_ind": 2, "role": "USER", "utterance": "seen it"},
    {"turn_ind": 3, "role": "ASST", "utterance": "Then Ronin.", "turn_level_aggregated": {"relevance": 1}}],
    "dial_level_aggregated": {"understanding": 1, "efficiency": 1}}


def _conv(change) -> list:
    c = copy.deepcopy(GOOD)
    change(c)
    return [c]


def _set(path: list, value):
    def change(c):
        obj = c
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return change


# name -> (file content: a list to dump, or raw text, or a special kind), expected words in the message
BAD_FILES = {
    "nan_label": ('[{"conv_id": "kbrd_redial_x", "dialogue": [{"turn_ind": 0, "role": "USER", "utterance": "hi"}, '
                  '{"turn_ind": 1, "role": "ASST", "utterance": "hello", '
                  '"turn_level_aggregated": {"relevance": NaN}}]}]', "label is nan"),
    "infinite_label": (_conv(_set(["dial_level_aggregated", "understanding"], float("inf"))), "label is inf"),
    "label_out_of_scale": (_conv(_set(["dialogue", 1, "turn_level_aggregated", "relevance"], 7)),
                           "outside the aspect's scale 0..2"),
    "binary_label_out_of_scale": (_conv(_set(["dial_level_aggregated", "efficiency"], 2)), "scale 0..1"),
    "string_label": (_conv(_set(["dialogue", 1, "turn_level_aggregated", "relevance"], "2")), "expected a number"),
    "label_on_user_turn": (_conv(_set(["dialogue", 0, "turn_level_aggregated"], {"relevance": 1})),
                           "on a USER turn"),
    "negative_turn_ind": (_conv(_set(["dialogue", 0, "turn_ind"], -1)), "negative turn_ind"),
    "duplicate_turn_ind": (_conv(_set(["dialogue", 2, "turn_ind"], 1)), "duplicate"),
    "out_of_order_turn_ind": (_conv(_set(["dialogue", 2, "turn_ind"], 0)), "out of order"),
    "empty_conv_id": (_conv(_set(["conv_id"], "")), "empty conv_id"),
    "no_assistant_turn": (_conv(_set(["dialogue"], [GOOD["dialogue"][0]])), "no ASST turn"),
    "empty_list": ([], "no conversations"),
    "empty_file": ("", "is empty"),
    "not_json": ("{conv_id: 1", "malformed JSON"),
    "directory": ("<dir>", "is a directory"),
    "device": ("<dev>", "not a regular file"),
}


def _make(tmp: Path, name: str, content) -> Path:
    if content == "<dir>":
        (tmp / name).mkdir(exist_ok=True)
        return tmp / name
    if content == "<dev>":
        return Path("/dev/null")
    p = tmp / f"{name}.json"
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return p


# the file-level refusals: there is no record to name
NO_RECORD = ("empty_file", "directory", "device")


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_conversation_file_is_one_data_error(tmp_path, name):
    """Each file as ``dataset.file=`` loads it (the CLI turns this DataError into its one line: CLI_FILES)."""
    content, expected = BAD_FILES[name]
    path = _make(tmp_path, name, content)
    with pytest.raises(DataError) as e:
        load_conversations(path, require_labels=False, allow_empty_utterances=False)
    msg = str(e.value)
    assert str(path) in msg and expected in msg and "\n" not in msg, msg
    assert name in NO_RECORD or "[" in msg, f"the message names no record: {msg!r}"


def test_good_file_still_loads(tmp_path):
    [c] = load_conversations(_make(tmp_path, "good", [GOOD]))
    assert [t.turn_ind for t in c.assistant_turns()] == [1, 3]


BAD_RUN_FILES = {
    "empty_run_file": ([], "empty run file"),
    "duplicate_conversation": ([{"conv_id": "a", "turns": []}, {"conv_id": "a", "turns": []}],
                               "conversation 'a'"),
    "duplicate_turn": ([{"conv_id": "a", "turns": [{"turn_ind": 1, "turn_level_pred": {"relevance": 1.0}},
                                                   {"turn_ind": 1, "turn_level_pred": {"relevance": 2.0}}]}],
                       "duplicate turn_ind 1"),
    "nan_prediction": ('[{"conv_id": "a", "dial_level_pred": {"efficiency": NaN}}]', "prediction is nan"),
}


@pytest.mark.parametrize("name", BAD_RUN_FILES)
def test_bad_run_file_is_one_data_error(tmp_path, name):
    content, expected = BAD_RUN_FILES[name]
    path = _make(tmp_path, name, content)
    with pytest.raises(DataError) as e:
        read_run_file(path)
    assert str(path) in str(e.value) and expected in str(e.value), str(e.value)


def test_utterance_far_over_the_context_is_reported_with_its_size(capsys):
    conv = Conversation("c1", (Turn(0, "USER", "hi"), Turn(1, ASSISTANT, "x" * 1_000_000)))
    lines = check_utterances([conv], 20_000)
    err = capsys.readouterr().err
    assert len(lines) == 1 and "'c1', turn_ind 1" in err and "1,000,000 characters" in err
    assert check_utterances([conv], None) == []


# ---------------------------------------------------------------- through the CLI
# Every bad file is the same DataError from load_conversations at the same step of a run (checked for each file
# above), so through the CLI: one record-level refusal, the parse error, and the three file-level ones.
CLI_FILES = ("nan_label", "not_json", *NO_RECORD)


def _cli_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    cases: dict[str, tuple[list[str], str]] = {}
    live = ["experiment=ablation_no_particles", "llm=fake", "dataset.download=false"]
    for name in CLI_FILES:
        content, expected = BAD_FILES[name]
        path = _make(tmp / "files", name, content)
        cases[f"file_{name}"] = ([*live, f"dataset.file={path}"], expected)
    afile = tmp / "files" / "a_file"
    afile.write_text("x")
    notdb = tmp / "files" / "notdb"
    notdb.mkdir()
    (notdb / "llm_cache.sqlite").write_text("this is not a database")
    (tmp / "files" / "mlflow_not_db").write_text("this is not a database either")
    cases.update({
        "limit_zero": (["dataset.limit=0"], "dataset.limit must be an integer >= 1 or null, got 0"),
        "limit_negative": (["dataset.limit=-3"], "dataset.limit must be an integer >= 1 or null, got -3"),
        "limit_not_integer": (["dataset.limit=abc"], "dataset.limit must be an integer >= 1 or null, got 'abc'"),
        "limit_float": (["dataset.limit=1.5"], "dataset.limit must be an integer >= 1 or null, got 1.5"),
        "method_n_zero": (["experiment=crsarena_main", "llm=fake", "dataset.limit=1", "method.scoring.n=0"],
                          "method.scoring.n must be an integer >= 1, got 0"),
        "concurrency_zero": (["experiment=crsarena_main", "llm.concurrency=0"],
                             "llm.concurrency must be an integer >= 1, got 0"),
        "unknown_estimator": (["experiment=crsarena_main", "method.scoring.estimator=magic"],
                              "method.scoring.estimator must be one of 'sampling', 'logprobs'"),
        "unknown_split": (["dataset.splits=[imdb]"], "unknown split(s) ['imdb']"),
        "unknown_metaeval_split": (["metaeval.splits=[imdb]"], "metaeval.splits ['imdb']"),
        "unknown_aspect": (["aspects=[humour]"], "no aspect 'humour'"),
        "n_boot_negative": (["metaeval.n_boot=-1"], "metaeval.n_boot must be an integer >= 0, got -1"),
        "temperature_not_numeric": (["experiment=crsarena_main", "llm.temperature=hot"],
                                    "llm.temperature must be a finite number in [0, 2], got 'hot'"),
        "method_temperature_not_numeric": (["experiment=crsarena_main", "llm=fake", "dataset.limit=1",
                                            "method.scoring.temperature=hot"],
                                           "method.scoring.temperature must be a finite number"),
        "max_cost_negative": (["experiment=crsarena_main", "llm.max_cost_usd=-1"],
                              "llm.max_cost_usd must be a finite number >= 0 or null, got -1"),
        "max_calls_negative": (["experiment=crsarena_main", "llm.max_calls=-5"],
                               "llm.max_calls must be an integer >= 0 or null, got -5"),
        "draw_rounds_zero": (["experiment=crsarena_main", "llm=fake", "dataset.limit=1",
                              "method.scoring.draws.rounds=0"],
                             "method.scoring.draws.rounds must be an integer >= 1, got 0"),
        "out_dir_under_a_file": ([f"report.out_dir={afile}/results"], "is a file"),
        "cache_dir_is_a_file": (["experiment=crsarena_main", "llm=fake", f"llm.cache_dir={afile}"],
                                "llm.cache_dir"),
        "cache_db_not_a_database": (["experiment=crsarena_main", "llm=fake", f"llm.cache_dir={notdb}"],
                                    "is not an SQLite database"),
        "mlflow_store_not_a_database": ([f"tracking.tracking_uri=sqlite:///{tmp / 'files' / 'mlflow_not_db'}"],
                                        "tracking.tracking_uri"),
        "api_key_in_api_key_env": (["experiment=crsarena_main", "llm=openai",
                                    "llm.api_key_env=sk-proj-AbCdEf0123456789xyzXYZ"],
                                   "llm.api_key_env must be the NAME"),
        "unknown_config_group": (["dataset=imdb"], "dataset=imdb: no such dataset (conf/dataset/imdb.yaml); valid, "
                                                   "closest first: "),
        "unknown_key": (["no_such_setting=1"], "Could not override 'no_such_setting'"),
        "llm_removed": (["experiment=crsarena_main", "~llm", "dataset.limit=1"],
                        "llm: the method calls an LLM and the configuration has none"),
        "model_empty": (["experiment=crsarena_main", "llm=fake", "llm.model=''", "dataset.limit=1", "run_size=tiny"],
                        "llm.model must be a non-empty string, got ''"),
        "server_option_misspelled": (["experiment=crsarena_main", "llm=scripted", "+llm.server.fault_rat=0.1"],
                                     "llm.server.fault_rat: not an option of ScriptedServer; its options, closest "
                                     "first: fault_rate, "),
        # the README's tour offline without FACE_DATA_MIRROR: the data cannot be fetched (here: downloads off)
        "data_not_fetchable": ([f"paths.data_dir={tmp / 'no_data'}", "dataset.download=false"],
                               "missing: no data mirror set (FACE_DATA_MIRROR), and downloading is disabled"),
    })
    return cases


def _argv(tmp: Path, data_dir: Path, name: str, overrides: list[str]) -> list[str]:
    base = [f"paths.data_dir={data_dir}", f"paths.results_dir={tmp / 'results'}", f"paths.cache_dir={tmp / 'cache'}",
            "paths.data_mirror=null", f"hydra.run.dir={tmp / 'runs' / name}",
            f"tracking.tracking_uri=sqlite:///{tmp / 'mlflow.db'}", f"tracking.artifact_location={tmp / 'mlruns'}"]
    mine = {o.partition("=")[0] for o in overrides}  # a case's own value of a base setting replaces it
    return [*(b for b in base if b.partition("=")[0] not in mine), *overrides]


def _run_cli(tmp: Path, data_dir: Path, name: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FACE_PROJECT_ROOT=str(tmp))
    env.pop("FACE_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), *_argv(tmp, data_dir, name, overrides)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp)


def _last_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory, data_dir):
    """Every case through ``scripts/run.py``'s ``cli()`` in this process, one after another (one Python process
    per case cost ≈ 7 s of CPU each, mostly imports)."""
    tmp = tmp_path_factory.mktemp("bad_inputs")
    (tmp / "files").mkdir()
    cases = _cli_cases(tmp)
    with pytest.MonkeyPatch.context() as mp:
        out = {name: run_in_process("run.py", _argv(tmp, data_dir, name, ov), tmp, mp)
               for name, (ov, _) in cases.items()}
    return tmp, cases, out


@pytest.mark.slow
def test_every_bad_input_through_the_cli(cli_results):
    tmp, cases, out = cli_results
    problems = []
    for name, (_, expected) in cases.items():
        r = out[name]
        last = r.lines[-1] if r.lines else ""
        if r.code != 2 or "Traceback" in r.err or not last.startswith("error:") or expected not in last:
            problems.append(f"{name}: rc={r.code} last={last!r} stderr={r.err[-600:]!r}")
        if name.startswith("file_") and "[" not in last and name.removeprefix("file_") not in NO_RECORD:
            problems.append(f"{name}: the line names no record: {last!r}")
        if r.changed:
            problems.append(f"{name}: changed outside its temp dir: {r.changed[:5]}")
        if (tmp / "runs" / name).exists():  # refused before Hydra's run directory was made
            problems.append(f"{name}: wrote its run directory: {sorted(os.listdir(tmp / 'runs' / name))}")
    assert not problems, "\n".join(problems)
    assert len(cases) >= 31
    assert not (tmp / "results").exists()  # nothing written to results/
    if (tmp / "mlflow.db").exists():  # no MLflow run at all: a refusal starts none (not even a FAILED one)
        with sqlite3.connect(tmp / "mlflow.db") as db:
            assert [s for (s,) in db.execute("SELECT status FROM runs")] == []
    # the key-looking api_key_env was refused before Hydra wrote .hydra/ or MLflow saw it
    leaked = [p for p in tmp.rglob("*") if p.is_file() and b"sk-proj-AbCdEf0123456789xyzXYZ" in p.read_bytes()]
    assert leaked == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["file_nan_label", "api_key_in_api_key_env"])
def test_a_bad_input_as_its_own_process_exits_2_with_the_in_process_line(cli_results, data_dir, name):
    """The process's own exit path (``run_cli``: exit code, the one line on stderr), for a refusal in the runner
    and one in ``cli()`` before it: the same code and line as the same case run in this process above."""
    tmp, cases, out = cli_results
    r = _run_cli(tmp, data_dir, f"{name}_process", cases[name][0])
    assert (r.returncode, _last_line(r.stderr)) == (2, out[name].lines[-1]), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.slow
def test_cli_live_run_writes_the_key_nowhere_including_hydra(tmp_path, data_dir):
    """The leak scan of tests/test_secrets.py, through the CLI: .hydra/*.yaml, MLflow, run dir, cache, results."""
    from face.testing.scripted import ScriptedServer

    secret = "sk-test-CLI-SECRET-91b2c3"
    with ScriptedServer() as info:
        env = dict(os.environ, PYTHONPATH=str(ROOT), FACE_PROJECT_ROOT=str(tmp_path), FACE_TEST_API_KEY=secret)
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "experiment=ablation_no_particles",
                            "llm=openai_compatible", f"llm.base_url={info.base_url}", "llm.model=scripted-model",
                            "llm.api_key_env=FACE_TEST_API_KEY", "llm.progress=false", "dataset.limit=1",
                            "aspects=[relevance]", "method.instructions.max=1", "method.scoring.n=1",
                            "metaeval.n_boot=0",
                            f"paths.data_dir={data_dir}", "paths.data_mirror=null", "dataset.download=false",
                            f"paths.cache_dir={tmp_path / 'cache'}", f"paths.results_dir={tmp_path / 'results'}",
                            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                            f"tracking.artifact_location={tmp_path / 'mlruns'}"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    hydra_files = list(tmp_path.glob("outputs/*/*/.hydra/*.yaml"))
    assert len(hydra_files) == 3 and any(b"FACE_TEST_API_KEY" in p.read_bytes() for p in hydra_files)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(b"scripted-model" in p.read_bytes() for p in written)  # the scan finds what the run wrote
    assert [p for p in written if secret.encode() in p.read_bytes()] == []
    assert secret not in r.stdout + r.stderr


@pytest.mark.slow
def test_a_sweep_whose_data_cannot_be_fetched_stops_before_hydra_writes_its_directory(tmp_path, monkeypatch):
    """The README tour's sweep offline without FACE_DATA_MIRROR (here: downloads off, no data): one line, exit 2,
    before the sweep directory, its first job's directory and the MLflow parent run exist (the parent was left
    RUNNING, the sweep directory with its job 0)."""
    argv = ["-m", "experiment=reproduce_table2", "metaeval.n_boot=0,1", f"paths.data_dir={tmp_path / 'no_data'}",
            "paths.data_mirror=null", "dataset.download=false", f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"tracking.artifact_location={tmp_path / 'mlruns'}"]
    r = run_in_process("run.py", argv, tmp_path, monkeypatch)
    assert r.code == 2 and r.lines[-1].startswith("error: ") and "missing: no data mirror set" in r.lines[-1], r.err
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "mlflow.db").exists() and r.changed == []
