"""Issue 9, acceptance: a live run straight to the scripted server and the same run through a proxy that
injects 20 % faults of every transport kind give identical run files; a kill -9 mid-run and a rerun resend at
most the requests that were in flight; the stopped MLflow run is then marked KILLED."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from live_run import run_live

import face.runner
from face.testing.faults import TRANSPORT_KINDS, FaultProxy
from face.testing.scripted import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
LIVE = ["experiment=crsarena_main", "llm=openai_compatible", "llm.model=scripted-model", "llm.progress=false",
        "dataset.limit=2", "method.particles.source=released", "method.instructions.max=2", "method.scoring.n=2",
        "aspects=[relevance,efficiency]", "metaeval.n_boot=0", "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.05",
        "llm.n_per_request=1",  # one request per sample: enough requests for every fault kind to occur
        "llm.adaptive_concurrency=false", "llm.concurrency=8"]  # no load-made timeouts beside the injected ones


def _live(cfg_factory, tmp_path: Path, name: str, base_url: str, *extra: str, tracking: bool = False):
    return run_live(cfg_factory, tmp_path / name, [*LIVE, f"llm.base_url={base_url}", *extra], tracking)


@pytest.mark.slow
def test_live_run_through_20_percent_faults_gives_the_same_run_file(cfg_factory, tmp_path):
    srv = ScriptedServer()
    with srv as info:
        clean, clean_usage = _live(cfg_factory, tmp_path, "clean", info.base_url)
        # a 2 s client timeout: a proxied answer slowed by a loaded machine is no retry the proxy did not cause
        with FaultProxy(info.base_url, rate=0.2, kinds=TRANSPORT_KINDS, hang_s=4.0) as proxy:
            faulty, usage = _live(cfg_factory, tmp_path, "faulty", proxy.base_url, "llm.timeout_s=2.0")
    faults = proxy.faults()
    n = clean_usage["http_requests"]
    assert n >= 40 and clean_usage["retries"] == 0
    assert set(faults) == set(TRANSPORT_KINDS) and 0.1 * n < len(faults) < 0.3 * n
    assert usage["retries"] == len(faults) and usage["failures"] == 0 and usage["http_requests"] == n
    assert faulty == clean and len(clean) == 2


_KILLED_RUN = """
import sys
import face.runner
sys.path[:0] = [{root!r}, {root!r} + "/tests"]  # the conftest imports helpers as the test session does
from helpers import make_cfg
from pathlib import Path
cfg = make_cfg(Path({tmp!r}), Path({data!r}), {overrides!r})
face.runner.run(cfg)
"""


@pytest.mark.slow
@pytest.mark.serial  # kills the run midway, read by polling: not beside another test
def test_kill_9_mid_run_then_rerun_resends_at_most_the_requests_in_flight(data_dir, tmp_path, mlflow_store):
    conc = 4
    shutil.copyfile(mlflow_store, tmp_path / "mlflow.db")  # an empty store: the killed run is left in it
    overrides = [*LIVE, f"llm.concurrency={conc}", "method.instructions.max=4", "llm.timeout_s=30"]
    srv = ScriptedServer(latency_s=0.05)
    with srv as info:
        overrides.append(f"llm.base_url={info.base_url}")
        code = _KILLED_RUN.format(root=str(ROOT), tmp=str(tmp_path), data=str(data_dir), overrides=overrides)
        proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while len(srv.log) < 30 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        first = {e["hash"] for e in srv.log}
        assert proc.returncode == -signal.SIGKILL and len(first) >= 30, proc.stderr.read().decode()[-2000:]
        srv.reset_log()
        from helpers import make_cfg

        cfg = make_cfg(tmp_path, data_dir, overrides)
        face.runner.run(cfg)
        resent = [e["hash"] for e in srv.log if e["hash"] in first]
    assert len(resent) <= conc  # only requests that were in flight when the process died
    assert len(srv.log) > 0 and json.loads((tmp_path / "run" / "run_file.json").read_text())
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(search_all_experiments=True)
    # the killed run is not left RUNNING: the finished rerun into its directory replaced it (one directory, one run)
    assert sorted(runs["status"]) == ["FINISHED"]


def _post(url: str, raw: bytes | None, method: str = "POST") -> tuple[int, str, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=raw, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


CHAT = json.dumps({"messages": [{"role": "user", "content": "hello"}], "seed": 1}).encode()


def test_the_scripted_server_answers_every_error_as_a_json_error():
    with ScriptedServer() as info:
        url = info.base_url + "/chat/completions"
        cases = [(_post(url, b"{not json"), 400, "bad_json"), (_post(url, b"[1, 2]"), 400, "invalid_type"),
                 (_post(info.base_url + "/nope", CHAT), 404, "not_found"),
                 (_post(url, None, method="GET"), 405, "method_not_allowed")]
        for (status, ctype, body), want, code in cases:
            err = json.loads(body)["error"]
            assert (status, ctype.split(";")[0]) == (want, "application/json")
            assert set(err) == {"message", "type", "code", "param"} and err["code"] == code
            assert err["message"].startswith("scripted server: ")


def _same(reply: tuple[int, str, bytes]) -> tuple:
    """A reply with what may differ between the two servers masked: who speaks, the second it was made."""
    status, ctype, body = reply
    return status, ctype.split(";")[0], re.sub(rb'"created": \d+', b"", body.replace(b"(proxy)", b"(scripted)"))


def test_the_scripted_server_and_the_proxy_inject_each_transport_fault_alike():
    """One implementation: a fault forced at the scripted server and the same fault forced at the proxy in front
    of a clean scripted server give the same reply (status, content type, body)."""
    srv = ScriptedServer(hang_s=0.05)
    with srv as info, FaultProxy(info.base_url, rate=0.0, hang_s=0.05) as proxy:
        for kind in ("429", "500", "html502", "html200", "timeout", "cut_json"):
            srv.force(kind)
            direct = _post(info.base_url + "/chat/completions", CHAT)
            proxy.injector.force(kind)
            proxied = _post(proxy.base_url + "/chat/completions", CHAT)
            assert _same(direct) == _same(proxied), kind
        assert [e["fault"] for e in srv.log][:6] == ["429", "500", "html502", "html200", "timeout", "cut_json"]
        assert direct[0] == 200 and direct[2] and not direct[2].endswith(b"}")  # cut_json: HTTP 200, half a body
