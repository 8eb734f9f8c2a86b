"""What the test files share, defined once (the fixtures built on it are in ``conftest.py``): chat logs written for
``face evaluate``, its command line and a run of it, money compared to the 9th digit, a composed configuration,
hand-built LLM configurations and chat requests, and a run through the one front door (``face.runner.run``:
composed, every setting and the credentials checked, outputs claimed, logs redacted -- as every entry point runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
FAKE = "fake"  # the scripted LM without a socket (conf/llm/fake.yaml); "scripted" is the HTTP server


def run_paths(tmp_path: Path, data_dir: Path, tracking: bool = True, run_dir: str = "run") -> list[str]:
    """The overrides that send every output of a run into ``tmp_path`` (its MLflow store too, or none): the run's
    own directory is ``tmp_path / run_dir``."""
    base = [
        f"paths.data_dir={data_dir}",
        f"paths.results_dir={tmp_path / 'results'}",
        f"paths.output_dir={tmp_path / run_dir}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "paths.data_mirror=null",
        "dataset.download=false",
    ]
    if tracking:
        base += [f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                 f"tracking.artifact_location={tmp_path / 'mlruns'}"]
    else:
        base += ["tracking=none"]
    return base


def write_logs(path: Path, convs: list[dict]) -> Path:
    """Chat logs as JSON Lines, one conversation a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")
    return path


def evaluate_argv(logs: Path, out: Path | str | None, *extra: str, aspects: str = "relevance", llm: str = FAKE,
                  cache_dir: Path | None = None, tiny: bool = True) -> list[str]:
    """``face evaluate``'s arguments for a small scripted run (``--yes``: nobody is asked)."""
    return ["evaluate", str(logs), "--aspects", aspects, "--llm", llm, "--yes",
            *([] if out is None else ["--out", str(out)]),
            *([] if cache_dir is None else ["--set", f"paths.cache_dir={cache_dir}"]),
            *(["--set", "run_size=tiny"] if tiny else []), *extra]


def evaluate(tmp: Path, logs: Path | list[dict], *extra: str, **kw: Any) -> int:
    """``face evaluate`` in this process on ``logs`` (a file, or conversations written to ``tmp/logs.jsonl``), its
    output in ``tmp/out`` and its LLM cache in ``tmp/cache``: its exit code."""
    from face.cli import main

    if not isinstance(logs, Path):
        logs = write_logs(tmp / "logs.jsonl", logs)
    return main(evaluate_argv(logs, tmp / "out", *extra, cache_dir=tmp / "cache", **kw))


def approx(x: float):
    """Money to the 9th significant digit (pytest's default 1e-6 would let a price per 1,000,001 tokens pass)."""
    import pytest

    return pytest.approx(x, rel=1e-9, abs=0)


def make_cfg(tmp_path: Path, data_dir: Path, overrides: list[str], tracking: bool = True):
    """Compose the real Hydra config with every output redirected into ``tmp_path`` (for a test that reads the
    configuration; a run goes through ``run_experiment``)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=run_paths(tmp_path, data_dir, tracking) + overrides)


def llm_config(tmp_path: Path | None = None, *, server: Any = None, base_url: str | None = None, **kw: Any):
    """An ``LLMConfig`` for a test: the scripted model, quick retries, no progress bar, no endpoint probe (tests that
    count requests; tests of the probe set ``probe=True``). Its endpoint: ``server`` (an ``InProcessServer``: its
    ``spec()``; or a spec dict), or ``base_url`` (an HTTP server the test started)."""
    from face.llm import LLMConfig

    if server is not None and hasattr(server, "spec"):
        server = server.spec()
    base: dict[str, Any] = {"backend": "scripted" if server is not None else "openai_compatible",
                            "server": server, "base_url": base_url, "model": "scripted-model", "progress": False,
                            "concurrency": 4, "timeout_s": 5.0, "max_retries": 4, "backoff_base_s": 0.01,
                            "backoff_max_s": 0.05, "probe": False}
    if tmp_path is not None:
        base["cache_dir"] = str(tmp_path / "cache")
    return LLMConfig(**{**base, **kw})


def chat_requests(k: int, text: str = "question {i}", *, n: int = 1, tag: str = "q", system: str | None = None,
                  **kw: Any) -> list:
    """``k`` chat requests of one user message each (``text`` formatted with the request's index ``i``), after a
    ``system`` message if given."""
    from face.llm import ChatRequest

    first = [] if system is None else [("system", system)]
    return [ChatRequest(messages=[*first, ("user", text.format(i=i))], n=n, tag=tag, **kw) for i in range(k)]


def run_overrides(overrides: list[str], **request: Any):
    """A run through the one front door (``face.runner.run``): its ``RunResult`` (``.cfg``: the task's composed
    configuration; ``.experiment``: what the experiment returned)."""
    from face.runner import RunRequest, run
    from face.runner.compose import composed

    with composed(overrides) as cfg:
        return run(cfg, RunRequest(**request))


def spy_on_figures(monkeypatch) -> dict[str, dict]:
    """What every figure saved through ``face.report.figures._save`` shows, by file name, while ``monkeypatch`` is in
    place (the ``plotted`` fixture's spy; a module-scoped fixture passes a ``pytest.MonkeyPatch.context()``)."""
    import matplotlib.text
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer, ErrorbarContainer

    import face.report.figures as report_figures

    seen: dict[str, dict] = {}
    save = report_figures._save

    def _outside(fig, legend, ax) -> bool | None:
        if legend is None:
            return None
        fig.canvas.draw()
        lb, ab = legend.get_window_extent(), ax.get_window_extent()
        return bool(lb.x0 >= ab.x1 or lb.x1 <= ab.x0 or lb.y0 >= ab.y1 or lb.y1 <= ab.y0)

    def spy(fig, path, note=None):
        first = fig.axes[0]
        ticks = first.get_xticklabels()
        plots = [ax for ax in fig.axes if ax.get_visible() and ax.axison and ax.get_label() != "<colorbar>"]
        legend = first.get_legend()
        shown: dict = {"bars": {}, "bar_bottoms": {}, "lines": {}, "points": np.empty((0, 2)),
                       "xticks": [t.get_text() for t in ticks],
                       "xtick_rotation": ticks[0].get_rotation() if ticks else 0.0,
                       "ylims": [ax.get_ylim() for ax in plots],
                       "xticklocs": [list(ax.get_xticks()) for ax in plots],
                       "colorbar_labels": [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"],
                       "legend_outside": _outside(fig, legend, first),
                       "texts": [t.get_text() for t in fig.findobj(matplotlib.text.Text)],
                       "size": tuple(fig.get_size_inches())}
        for ax in fig.axes:
            for c in ax.containers:
                if isinstance(c, BarContainer):
                    shown["bars"][c.get_label()] = [r.get_height() for r in c]
                    shown["bar_bottoms"][c.get_label()] = [r.get_y() for r in c]
                elif isinstance(c, ErrorbarContainer) and c.lines[0] is not None:
                    x, y = c.lines[0].get_data()
                    shown["lines"][f"{ax.get_title()}/{c.get_label()}"] = (list(x), list(y))
            for coll in ax.collections:
                if isinstance(coll, PathCollection):
                    shown["points"] = np.vstack([shown["points"], coll.get_offsets()])
        seen[Path(path).name] = shown
        return save(fig, path, note)

    monkeypatch.setattr(report_figures, "_save", spy)
    return seen


def with_overrides(cfg, *overrides: str):
    """A copy of the composed ``cfg`` with ``overrides`` (settings, not config groups) applied by Hydra's own last
    step of a composition (``ConfigLoaderImpl._apply_overrides_to_config``: what composing with them appended gives),
    without composing again (≈ 0.3 s a composition)."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = copy.deepcopy(cfg)
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(list(overrides)), out)
    return out


def run_script(argv: list[str]) -> tuple[int, str, str]:
    """``python scripts/run.py ARGV`` in this process: the script's ``cli()`` as its ``__main__`` block calls it (the
    secrets check, Hydra's multirun and sweep callback, each job through the runner), without a new interpreter and
    its imports (≈ 4 s of CPU): (exit code, stdout, stderr). The caller sets the environment and the working
    directory (``monkeypatch``); sys.argv, the SIGTERM handler, Hydra's global state and the root logger's handlers
    (Hydra configures logging for each job) are restored."""
    import contextlib
    import importlib.util
    import io
    import logging
    import signal
    import sys

    from hydra.core.global_hydra import GlobalHydra

    spec = importlib.util.spec_from_file_location("face_run_script", ROOT / "scripts" / "run.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv, signal.getsignal(signal.SIGTERM), logging.root.handlers[:], logging.root.level
    sys.argv = ["scripts/run.py", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = script.cli()
            except SystemExit as e:
                code = e.code
    finally:
        sys.argv = saved[0]
        signal.signal(signal.SIGTERM, saved[1])
        for h in [h for h in logging.root.handlers if h not in saved[2]]:
            h.close()
        logging.root.handlers[:] = saved[2]
        logging.root.setLevel(saved[3])
        GlobalHydra.instance().clear()
    return (0 if code is None else int(code)), out.getvalue(), err.getvalue()


def released_particle_scores(data_dir: Path, aspect: str, level: str, conv_ids: set[str],
                             per_particle: Callable[[dict[str, float]], float]) -> dict:
    """Read straight from the authors' released run file (not through the project's loaders): per turn
    ``(conv_id, turn)`` or per conversation, ``per_particle`` of each particle's ``{instruction_id: score}``."""
    from face.data import released_scores_file

    particles: dict = {}
    for line in (data_dir / released_scores_file(aspect)).read_text().splitlines():
        obj = json.loads(line)
        if obj["conv_id"] in conv_ids:
            for t, turn in obj["turns"].items():
                key = (obj["conv_id"], int(t)) if level == "turn" else obj["conv_id"]
                for by_instruction in turn["particles"].values():
                    particles.setdefault(key, []).append(per_particle(by_instruction))
    return particles


def raw_labels(data_dir: Path, n_convs: int, aspect: str, level: str) -> dict:
    """Read straight from CRSArena-Eval's file: the human labels of ``aspect`` of its first ``n_convs`` conversations,
    per turn ``(conv_id, turn)`` or per conversation."""
    from face.data import CRSARENA_EVAL

    raw = json.loads((data_dir / CRSARENA_EVAL).read_text())[:n_convs]
    if level == "turn":
        return {(c["conv_id"], t["turn_ind"]): t["turn_level_aggregated"][aspect] for c in raw
                for t in c["dialogue"] if aspect in (t.get("turn_level_aggregated") or {})}
    return {c["conv_id"]: c["dial_level_aggregated"][aspect] for c in raw}
