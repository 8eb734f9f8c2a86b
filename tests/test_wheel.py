"""The package as users install it (issue 42, item 6): the wheel built from the sources, installed non-editable into
a fresh virtual environment, runs ``face evaluate`` (the scripted LLM) and ``face compare`` with their HTML reports
from a directory outside the checkout. The rest of the suite runs from the editable install, which reads prompts,
templates and ``conf/`` from the checkout and so cannot see a file the wheel leaves out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _files(root: Path) -> set[str]:
    """Every file under ``root`` but Python's bytecode caches."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _fresh_venv(tmp: Path) -> Path:
    """A virtual environment holding only the wheel built from a copy of the sources (the checkout is left as it
    is: a build writes build/ beside pyproject.toml); the main environment's packages are visible through a .pth
    file, so nothing is fetched but the build backend (as ``pip install -e .`` fetches it, from pip's index or cache).
    A .pth line puts a directory on sys.path without reading the .pth files in it: the editable install there is
    not seen. Its python."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("face", "conf"):  # face/conf is a link to conf/, kept as one
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", str(src), "--no-deps", "-q", "-w", str(tmp / "wheels")], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
    python = tmp / "venv" / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "main-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    [wheel] = (tmp / "wheels").glob("face-*.whl")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True)
    return python


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_evaluates_and_compares_with_html_reports_outside_the_checkout(
        tmp_path, mirror):
    python = _fresh_venv(tmp_path)
    venv = python.parents[1]
    user = tmp_path / "user"  # the user's directory: no checkout around it
    user.mkdir()
    logs = shutil.copy(ROOT / "docs" / "examples" / "sample_logs.jsonl", user / "logs.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACE_") and k != "PYTHONPATH"}
    env["FACE_DATA_MIRROR"] = str(mirror)  # the released instructions, fetched into the user's data/ from the mirror

    def face(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "face"), *argv], cwd=user, env=env, capture_output=True,
                              text=True, timeout=300)

    where = subprocess.run([python, "-c", "import face; print(face.__file__)"], cwd=user, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(venv), where  # the installed package, not the checkout
    installed = _files(venv)
    ran = face("evaluate", "logs.jsonl", "--llm", "fake", "--aspects", "relevance,dialogue_overall", "--out", "a",
               "--yes", "--set", "run_size=tiny")
    assert ran.returncode == 0, ran.stderr[-3000:]
    ids = [json.loads(line)["id"] for line in logs.read_text().splitlines()]
    assert [c["conv_id"] for c in json.loads((user / "a" / "run_file.json").read_text())] == ids
    assert "<title>FACE diagnostics — a</title>" in (user / "a" / "report.html").read_text()
    assert (user / "data" / "cache" / "llm" / "llm_cache.sqlite").is_file()  # the cache: in the working directory
    assert _files(venv) == installed  # nothing written into the installation
    shutil.copytree(user / "a", user / "b")
    ran = face("compare", "a", "b", "--out", "cmp")
    assert ran.returncode == 0, ran.stderr[-3000:]
    html = (user / "cmp" / "report.html").read_text()
    assert "<title>FACE comparison — a vs b</title>" in html and "relevance" in html and "dialogue_overall" in html
