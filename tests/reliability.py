"""The reliability suite's harness (issue 21): run an entry point as a user would -- ``face ...`` or
``python scripts/run.py ...`` -- in this process, and report what it did: its exit code, what it printed, and
which files changed anywhere outside the case's temp dir.

A case is refused properly when ``refused(outcome, *words)`` is empty: exit 2, exactly one non-warning line on
stderr, starting ``error:``, containing every expected word, no traceback, and no file changed outside the case's
temp dir (the project tree: its sources, ``results/``, ``outputs/``, ``multirun/``, ``data/``, the MLflow store).

Every case runs with ``FACE_PROJECT_ROOT`` pointing into its temp dir, so a run that was *not* refused writes
there and nowhere else; the repository is watched all the same, since that is what a careless path would hit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SKIP = {".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "face.egg-info"}


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under the roots, and every directory (by its presence: a directory's size and
    mtime change with its entries, which are listed themselves; compared, they would report the ``__pycache__`` that
    Python writes beside an imported module as a change of its directory). The virtualenv, git and caches are
    skipped."""
    seen: dict[str, tuple[int, int]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP]
            seen[dirpath] = (-1, -1)
            for name in [*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]:
                p = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(p)
                    seen[p] = (st.st_size, st.st_mtime_ns)
    return seen


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    changed: list[str] = field(default_factory=list)  # paths outside the case's temp dir that changed

    @property
    def lines(self) -> list[str]:
        """stderr's lines that say something (warnings are allowed beside the one error line)."""
        return [ln for ln in self.err.splitlines() if ln.strip() and not ln.startswith("warning:")]


def _script_module():
    spec = importlib.util.spec_from_file_location("face_run_script", ROOT / "scripts" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _call(fn, argv0: str, argv: list[str]) -> int | None:
    old = sys.argv
    sys.argv = [argv0, *argv]
    try:
        return fn()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) or e.code is None else 1
    finally:
        sys.argv = old


def run(entry: str, argv: list[str], tmp: Path, monkeypatch, watch: tuple[Path, ...] = ()) -> Outcome:
    """Run ``face`` (entry="face") or ``scripts/run.py`` (entry="run.py") with argv, in-process, from ``tmp``.
    ``watch``: extra paths outside tmp to check for changes (the repository is always watched)."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.setenv("FACE_PROJECT_ROOT", str(tmp))
    monkeypatch.delenv("FACE_DEBUG", raising=False)
    monkeypatch.chdir(tmp)
    roots = (ROOT, *watch)
    before = snapshot(*roots)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if entry == "face":
                from face.cli import main

                code = _call(lambda: main(argv), "face", argv)
            elif entry == "run.py":
                code = _call(_script_module().cli, "scripts/run.py", argv)
            else:
                raise ValueError(f"unknown entry point {entry!r}")
        except (Exception, KeyboardInterrupt) as e:  # an escaped exception (Ctrl-C too) is a traceback to the user
            import traceback

            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(e)))
            code = 1
        finally:
            GlobalHydra.instance().clear()
    return Outcome(code, out.getvalue(), err.getvalue(),
                   [p for p in changed(before, snapshot(*roots)) if not p.startswith(str(tmp))])


def entry_argv(entry: str, tmp: Path, *settings: str, logs: Path | None = None, llm: str = "fake") -> list[str]:
    """A case's command line for ``run``: ``face evaluate LOGS`` with the LLM ``llm``, its output in ``tmp/out``,
    nobody asked, each setting a ``--set``; or ``scripts/run.py``'s crsarena_main with ``llm=LLM`` and the settings
    as its overrides."""
    if entry == "face":
        return ["evaluate", str(logs), "--llm", llm, "--out", str(tmp / "out"), "--yes",
                *(x for s in settings for x in ("--set", s))]
    return ["experiment=crsarena_main", f"llm={llm}", *settings]


# capabilities that let root read, write and chmod past a file's mode bits (linux/capability.h)
_DAC_CAPS = {"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3}
_PR_CAPBSET_DROP = 24


def _without_dac_caps() -> None:
    """In the child, before exec: drop the capabilities above from the bounding set, so that the program it runs --
    even as root -- holds none of them and obeys the file modes as any user does."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _DAC_CAPS.values():
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_unprivileged(argv: list[str], tmp: Path) -> Outcome:
    """``face ARGV`` in a process of its own that file modes bind (as root too: without the DAC capabilities, which
    is how CI runs), from ``tmp``; the outcome without the watch of the project tree."""
    import subprocess

    env = {**os.environ, "FACE_PROJECT_ROOT": str(tmp), "PYTHONPATH": str(ROOT)}
    env.pop("FACE_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "face.cli", *argv], cwd=tmp, env=env, capture_output=True,
                         text=True, timeout=300, preexec_fn=_without_dac_caps if os.geteuid() == 0 else None)
    return Outcome(res.returncode, res.stdout, res.stderr)


def refused(o: Outcome, *words: str) -> list[str]:
    """What is wrong with how the case was refused (empty: refused properly)."""
    problems = []
    if o.code != 2:
        problems.append(f"exit {o.code}, not 2")
    if "Traceback" in o.err or "Traceback" in o.out:
        problems.append("a traceback")
    if len(o.lines) != 1:
        problems.append(f"{len(o.lines)} lines on stderr, not 1: {o.lines[:5]!r}")
    elif not o.lines[0].startswith("error:"):
        problems.append(f"the line does not start with 'error:': {o.lines[0]!r}")
    missing = [w for w in words if not any(w in ln for ln in o.lines)]
    if missing:
        problems.append(f"the line does not say {missing!r}: {o.lines[:2]!r}")
    if o.changed:
        problems.append(f"files changed outside the temp dir: {o.changed[:5]!r}")
    return problems
