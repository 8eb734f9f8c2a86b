"""Shared fixtures: the data mirror (../shared/data in CI), a verified data dir, Hydra-composed configs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import make_cfg, run_paths
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
pytest_plugins = ["scripted_face"]  # the fixtures of the pipeline's parts against the scripted server
PROJECT_CACHE = ROOT / "data" / "cache"  # the LLM cache of the project's own runs (the README's tour fills it)


def _files(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in d.rglob("*") if p.is_file()} if d.is_dir() else {}


@pytest.fixture(autouse=True)
def _the_projects_own_llm_cache_is_left_alone():
    """No test opens the project's own LLM cache: every run of a test caches in its temp dir (``paths.cache_dir``,
    ``FACE_CACHE_DIR``). Opening that SQLite database, even to check it, changes its -shm file, which a reliability
    case running beside it, watching the project tree, reports as a write."""
    before = _files(PROJECT_CACHE)
    yield
    assert _files(PROJECT_CACHE) == before, (f"{PROJECT_CACHE} changed during this test (or one running beside it): "
                                             "point its runs' paths.cache_dir or FACE_CACHE_DIR into its tmp_path")


def _mirror() -> Path:
    env = os.environ.get("FACE_DATA_MIRROR")  # relative to where the tests are run from, as the README writes it
    return Path(env).resolve() if env else ROOT.parent / "shared" / "data"


def shared_dir(tmp_path_factory) -> Path:
    """A directory every xdist worker of this pytest session sees (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``shared_dir / name``, filled by ``build`` once per session: the first xdist worker that asks builds it, the
    other waits on a lock and reads the same directory. A build that raises leaves it unfinished (the next asker
    starts again)."""
    import fcntl

    shared = shared_dir(tmp_path_factory)
    d = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".finished").exists():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            build(d)
            (d / ".finished").touch()
    return d


@pytest.fixture(scope="session")
def mirror() -> Path:
    m = _mirror()
    if not (m / "crsarena_eval" / "crs_arena_eval.json").exists():
        pytest.fail(f"data mirror not found at {m}: set FACE_DATA_MIRROR to a copy of the data (e.g. ../shared/data)")
    return m


@pytest.fixture(scope="session")
def data_dir(mirror: Path, tmp_path_factory) -> Path:
    """A data directory filled from the mirror through the project's own fetch step (sha256-verified)."""
    from face.data import ensure_data

    d = tmp_path_factory.mktemp("data")
    ensure_data(d, mirror=mirror, download=False)
    return d


@pytest.fixture(scope="session", autouse=True)
def _no_run_fetches_into_the_project(data_dir: Path):
    """A run that keeps the default ``paths.data_dir`` (the CLI's and the API's estimates, ``face compare``) reads
    ``FACE_DATA_DIR``: the session's data directory, not the project's ``data/raw``, which a reliability case running
    beside it, watching the project tree, would report as a write."""
    before = os.environ.get("FACE_DATA_DIR")
    os.environ["FACE_DATA_DIR"] = str(data_dir)
    yield
    if before is None:
        os.environ.pop("FACE_DATA_DIR", None)
    else:
        os.environ["FACE_DATA_DIR"] = before


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, made once per session: creating one runs MLflow's ~50 schema migrations
    (1-4 s); a copy of this one is the same empty store in a few milliseconds. Tests that do not request it (the
    CLI, sweeps, the reliability suite, every check that a refused run creates no store) still start without one."""
    from mlflow.tracking import MlflowClient

    def build(d: Path) -> None:
        MlflowClient(tracking_uri=f"sqlite:///{d / 'mlflow.db'}").search_experiments()

    return built_once(tmp_path_factory, "mlflow_store", build) / "mlflow.db"


@pytest.fixture
def cfg_factory(tmp_path: Path, data_dir: Path, request):
    """Configs as ``make_cfg`` composes them. A test that also requests ``mlflow_store`` (e.g.
    ``@pytest.mark.usefixtures("mlflow_store")``: its runs are tracked, and whether they create the store is not
    what it checks) starts with a copy of it as its store."""
    def factory(*overrides: str, tracking: bool = True) -> DictConfig:
        if tracking and "mlflow_store" in request.fixturenames and not (tmp_path / "mlflow.db").exists():
            shutil.copyfile(request.getfixturevalue("mlflow_store"), tmp_path / "mlflow.db")
        return make_cfg(tmp_path, data_dir, list(overrides), tracking)

    return factory


@pytest.fixture
def run_experiment(tmp_path: Path, data_dir: Path, request):
    """Runs through the one front door (``face.runner.run``, as every entry point runs: the credential check, the
    claim of the output directories, redacted logs), every output in ``tmp_path``: ``run_experiment(*overrides,
    tracking=True, run_dir="run", **RunRequest fields) -> RunResult`` (``.cfg`` the composed task configuration,
    ``.experiment`` the experiment's result). With ``mlflow_store`` requested, the run starts from a copy of the
    empty store."""
    from helpers import run_overrides

    def run(*overrides: str, tracking: bool = True, run_dir: str = "run", **fields):
        if tracking and "mlflow_store" in request.fixturenames and not (tmp_path / "mlflow.db").exists():
            shutil.copyfile(request.getfixturevalue("mlflow_store"), tmp_path / "mlflow.db")
        return run_overrides([*run_paths(tmp_path, data_dir, tracking, run_dir), *overrides], **fields)

    return run


@pytest.fixture
def forget_probes():
    """The endpoint probe's memory (``face.llm.probe``) empty before and after the test."""
    from face.llm import probe

    probe.forget()
    yield
    probe.forget()


@pytest.fixture(scope="session")
def evaluated_chat_logs(tmp_path_factory) -> Path:
    """The output directory of `face evaluate` on test_cli's two chat logs (scripted LLM, tiny run size, aspects
    relevance and dialogue_overall), run once per session -- by the first xdist worker that asks, the other waits on
    a lock and reads the same directory -- for the tests that only read what it wrote (a test that changes a file
    works on a copy). What the run printed is kept beside it (``evaluated_chat_logs_console``)."""
    import contextlib
    import io

    from helpers import evaluate
    from test_cli import CHAT

    def build(tmp: Path) -> None:
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mp.delenv("FACE_PROGRESS", raising=False)  # captured output: whether bars are drawn is the run's call
            code = evaluate(tmp, CHAT, aspects="relevance,dialogue_overall")
        (tmp / "stdout.txt").write_text(out.getvalue(), encoding="utf-8")
        (tmp / "stderr.txt").write_text(err.getvalue(), encoding="utf-8")
        assert code == 0, err.getvalue()[-2000:]

    return built_once(tmp_path_factory, "chat_logs", build) / "out"


# the README tour's optimizer sweep, small: 8 conversations, one aspect, alpha=1,2 x beam=1,2 (4 jobs), one round
OPTIMIZER_SWEEP = ["experiment=optimize_instructions", "aspects=[relevance]", "dataset.limit=8", "run_size=tiny",
                   "llm=fake", "optimizer.pulls=12", "optimizer.pull_minibatch=6", "optimizer.expand_minibatch=6",
                   "optimizer.top_k=4", "optimizer.alpha=1,2", "optimizer.beta=1", "optimizer.beam=1,2",
                   "optimizer.rounds=1"]


@pytest.fixture(scope="session")
def optimizer_sweep(tmp_path_factory, mirror, mlflow_store):
    """``scripts/run.py -m`` OPTIMIZER_SWEEP from the repository (its cli() in this process: ``helpers.run_script``)
    into a copy of the empty MLflow store, run once per session -- by the first xdist worker that asks, the other
    waits on a lock and reads the same directory -- for the tests that read what it left (test_optimize_runs: the runs
    and the sweep report; test_prompt_registry: the prompts). ``.uri`` its store, ``.sweep`` its sweep dir,
    ``.code`` / ``.out`` / ``.err`` the exit code and output, ``.git_before`` / ``.git_after`` ``git status
    --porcelain`` of the repository around it."""
    import json
    import subprocess
    from types import SimpleNamespace

    from helpers import run_script

    def git_status() -> str:
        return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout

    def build(tmp: Path) -> None:
        shutil.copyfile(mlflow_store, tmp / "m.db")  # an empty store: what the sweep makes of it is checked
        before, cwd = git_status(), os.getcwd()
        os.chdir(ROOT)
        try:
            code, out, err = run_script(["-m", *OPTIMIZER_SWEEP, f"tracking.tracking_uri=sqlite:///{tmp / 'm.db'}",
                                         f"tracking.artifact_location={tmp / 'mlruns'}",
                                         f"paths.cache_dir={tmp / 'cache'}", f"paths.data_dir={tmp / 'data'}",
                                         f"paths.data_mirror={mirror}", f"hydra.sweep.dir={tmp / 'sweep'}"])
        finally:
            os.chdir(cwd)
        done = {"code": code, "out": out, "err": err, "git_before": before, "git_after": git_status()}
        (tmp / "result.json").write_text(json.dumps(done))

    tmp = built_once(tmp_path_factory, "optimizer_sweep", build)
    return SimpleNamespace(uri=f"sqlite:///{tmp / 'm.db'}", sweep=tmp / "sweep",
                           **json.loads((tmp / "result.json").read_text()))


@pytest.fixture(scope="session")
def evaluated_chat_logs_console(evaluated_chat_logs: Path) -> tuple[Path, str, str]:
    """``evaluated_chat_logs``'s run as its console saw it: (output directory, stdout, stderr), both streams
    captured (not a terminal) and FACE_PROGRESS unset."""
    run = evaluated_chat_logs.parent
    return (evaluated_chat_logs, (run / "stdout.txt").read_text(encoding="utf-8"),
            (run / "stderr.txt").read_text(encoding="utf-8"))


@pytest.fixture
def plotted(monkeypatch) -> dict[str, dict]:
    """What every figure saved during the test shows, read back from its matplotlib objects, by file name:
    ``bars`` {series label: bar heights}, ``bar_bottoms`` {series label: where each bar starts}, ``lines``
    {label: (x, y)} of error-bar lines, ``points`` the scatter points (n × 2), ``xticks`` the tick labels of the
    first axes, ``xtick_rotation`` their rotation, ``ylims`` / ``xticklocs`` per visible axes, ``colorbar_labels``,
    ``legend_outside`` (None: no legend on the first axes; True: drawn clear of its data area), ``texts`` every
    title and text, ``size`` the figure's inches. Figures are still written as usual."""
    from helpers import spy_on_figures

    return spy_on_figures(monkeypatch)
