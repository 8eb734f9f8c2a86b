"""Screenshots of the MLflow UI for the docs: the runs table, a run page, the Prompt Registry (docs/comparing_runs.md)
and FACE's assessments beside MLflow's own judge on traced conversations (notebooks/mlflow_scorers.ipynb).

    python scripts/screenshots.py [--only runs|face] [--out docs/screenshots] [--browser chromium]

Runs, into a fresh MLflow store in a temporary directory (nothing is written to the checkout but the fetched data):
for `runs`, reproduce_table2, the same with method.particle_agg=median, system_level (released scores, no LLM), a
tiny scripted optimizer sweep (alpha=1,2 x beam=1,2, one round, 8 conversations, relevance), the same over three
keys (alpha x beta x beam: 8 jobs), and `face evaluate --mlflow` (scripted) on docs/examples/sample_logs.jsonl split
into one file per system, v1.jsonl and v2.jsonl, then `face compare mlflow:<v1> mlflow:<v2> --mlflow`; for `face`,
the notebook notebooks/mlflow_scorers.ipynb top to bottom in a Jupyter kernel (scripts/run_notebooks.py, with
FACE_MLFLOW_URI and FACE_CACHE_DIR pointing into the temporary directory): a toy recommender traced into three
sessions, evaluated by `mlflow.genai.evaluate` with FACE's scorers (llm=scripted) and MLflow's
ConversationCompleteness (a scripted OpenAI-compatible server). Without --only it does both. Then it starts `mlflow
ui` on a free loopback port and renders each page in headless Chromium, driven through the DevTools protocol over a
pipe (`--remote-debugging-pipe`, standard library only), and stops both.

Each page opens in a fresh browser profile with nothing written into it beforehand but the MLflow assistant
panel's closed state: what MLflow shows a new user, then only the clicks a user makes (MLflow 3 shows no metric or
param column until one is picked in the Columns menu: the script picks them there, typing each name into the menu's
search box; the evaluation run's traces table loses its Trace ID, Execution time and State columns there, so the
assessment columns are wide enough for their names; a sweep's parent is expanded by clicking its row's expand
button). Columns keep MLflow's default widths (the sweeps' Run Name column included: the children must be told
apart there).

Writes to --out: runs_table.png (reproduce_table2's runs with their headline metrics), run_page.png (one of its
runs), sweep_runs.png (the sweep: parent and its four children, swept params, summary.* metrics),
sweep_charts.png (the experiment's chart view, opening on summary.*), sweep_compare.png (Compare on the four
children: the parallel-coordinates plot over the swept params and the headline), sweep_parent.png (the parent's
page: the sweep report as its description, the command line's settings as params), sweep_child_run.png (a child
run: parent link, params, metrics), prompt_versions.png (the sweep's candidates prompt
`face-opt-relevance-sweep-alpha-beam-<id8>`: versions, commit messages led by the job's values, aliases),
set_versions.png (`face-opt-relevance-set`: one version per job's final set, aliased by its values, `@best`),
prompts.png (the Prompt Registry), sweep3_runs.png (the three-key sweep's eight children at the default Run Name
width), evaluate_runs.png (the `face evaluate` runs, named by input file and judge, with their summary metrics),
evaluate_run.png (one of them: description, metrics, the input's own dataset digest), compare_run.png (the
`face compare --mlflow` run: its verdicts in a fixed-width description);
face_assessments.png (the evaluation run's Traces tab, ungrouped: each turn's request and response with
conversation_completeness, face_dialogue_overall, both on the first trace of their session, and face_relevance on
every trace), face_assessment_detail.png (the heist session's page: its turns with face_relevance, and the session
assessments panel, widened by dragging its edge, with face_dialogue_overall and conversation_completeness
expanded: value, source, rationale; FACE's rationale lists the lowest-scoring particles).
Needs Chromium (Debian: apt-get install chromium).
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SWEEP = ["-m", "experiment=optimize_instructions", "llm=scripted", "optimizer.alpha=1,2", "optimizer.beam=1,2",
         "optimizer.beta=1", "optimizer.rounds=1", "dataset.limit=8", "aspects=[relevance]"]
SWEEP3 = ["-m", "experiment=optimize_instructions", "llm=scripted", "optimizer.alpha=1,2", "optimizer.beta=1,2",
          "optimizer.beam=1,2", "optimizer.rounds=1", "dataset.limit=8", "aspects=[relevance]"]  # 3 keys: 8 jobs
SWEPT = ["optimizer.alpha", "optimizer.beam"]
OPT_METRICS = ["summary.final_heldout_spearman", "summary.initial_heldout_spearman", "summary.gain_heldout_spearman"]
TABLE2_METRICS = ["summary.turn_spearman_mean", "summary.dialogue_spearman_mean"]
NOTEBOOK = ROOT / "notebooks" / "mlflow_scorers.ipynb"
NOTEBOOK_EXPERIMENT = "face-toy-recommender"
NO_ASSISTANT = {"mlflow.assistant.panelOpen_v1": "false", "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_jobs(store: str, tmp: Path) -> None:
    """The three released-score jobs, then the scripted sweep; every output path points into tmp."""
    common = [f"tracking.tracking_uri={store}", f"tracking.artifact_location={tmp / 'artifacts'}",
              f"paths.results_dir={tmp / 'results'}"]
    jobs = [["experiment=reproduce_table2"], ["experiment=reproduce_table2", "method.particle_agg=median"],
            ["experiment=system_level"]]
    for i, job in enumerate(jobs):
        subprocess.run([sys.executable, "scripts/run.py", *job, *common, f"hydra.run.dir={tmp / f'run{i}'}",
                        "metaeval.n_boot=200"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "scripts/run.py", *SWEEP, *common, f"hydra.sweep.dir={tmp / 'sweep'}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "scripts/run.py", *SWEEP3, *common, f"hydra.sweep.dir={tmp / 'sweep3'}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    evaluate_and_compare(store, tmp)


def evaluate_and_compare(store: str, tmp: Path) -> None:
    """docs/examples/sample_logs.jsonl as two files, one per system (v1.jsonl, v2.jsonl), each through
    `face evaluate --mlflow` (scripted), then `face compare mlflow:<v1> mlflow:<v2> --mlflow`."""
    from mlflow.tracking import MlflowClient

    rows = [json.loads(line) for line in (ROOT / "docs" / "examples" / "sample_logs.jsonl").open(encoding="utf-8")]
    sets = ["--set", f"tracking.tracking_uri={store}", "--set", f"tracking.artifact_location={tmp / 'artifacts'}"]
    for v, system in (("v1", "moviebot-a"), ("v2", "moviebot-b")):
        logs = tmp / f"{v}.jsonl"
        logs.write_text("".join(json.dumps(r) + "\n" for r in rows if r["system"] == system), encoding="utf-8")
        subprocess.run([str(BIN / "face"), "evaluate", str(logs), "--aspects", "relevance,dialogue_overall", "--llm",
                        "scripted", "--out", str(tmp / f"eval_{v}"), "--yes", "--mlflow", *sets], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("face_evaluate").experiment_id
    ids = {r.data.tags["face.short_name"]: r.info.run_id for r in client.search_runs([exp])}
    subprocess.run([str(BIN / "face"), "compare", f"mlflow:{ids['v1']}", f"mlflow:{ids['v2']}", "--mlflow",
                    "--tracking-uri", store, "--out", str(tmp / "compare")], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)


def run_notebook(store: str, tmp: Path) -> None:
    """notebooks/mlflow_scorers.ipynb through scripts/run_notebooks.py (a Jupyter kernel, this checkout's face), its
    store and FACE's LLM cache in tmp. Its experiment is made first with its artifacts in tmp: left to the notebook,
    they would go to ./mlruns beside it."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=store).create_experiment(NOTEBOOK_EXPERIMENT, artifact_location=str(tmp / "artifacts"))
    env = {**os.environ, "FACE_MLFLOW_URI": store, "FACE_CACHE_DIR": str(tmp / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    subprocess.run([sys.executable, "scripts/run_notebooks.py", str(NOTEBOOK), "--out", str(tmp / "notebooks")],
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


class Chromium:
    """Headless Chromium driven over the DevTools protocol on fds 3/4 (`--remote-debugging-pipe`): messages are
    JSON terminated by a NUL byte, so no websocket client is needed."""

    def __init__(self, browser: str, profile: Path, width: int, height: int):
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def to_fds_3_4() -> None:  # via fds >= 10 first, so one dup2 cannot overwrite the other's source
            a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(res_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=to_fds_3_4, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(res_w)
        self._buf, self._id = b"", 0
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:  # skip events until our reply
            while b"\0" not in self._buf:
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise SystemExit("chromium exited")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise SystemExit(f"chromium: {method}: {reply['error']}")
                return reply["result"]

    def page(self, method: str, **params) -> dict:
        return self.send(method, self._session, **params)

    def js(self, expression: str):
        return self.page("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def goto(self, url: str, ready_text: str, timeout: float = 120) -> None:
        """Load url and wait until the page shows ready_text (the UI fetches its data after the page loads)."""
        self.page("Page.navigate", url=url)
        end = time.monotonic() + timeout
        while not self.js(f"document.body && document.body.innerText.includes({json.dumps(ready_text)})"):
            if time.monotonic() > end:
                raise SystemExit(f"{url} did not show {ready_text!r} within {timeout:.0f} s")
            time.sleep(0.5)
        time.sleep(2)  # let the last requests (metrics, aliases) render

    def drag(self, selector: str, dx: int) -> None:
        """Drag the element (a panel's resize handle) dx pixels sideways with the mouse, 3 px a step, each once
        the element has followed the pointer, so the pointer never passes over (and highlights) what lies beside
        it; then move the mouse to the page's top edge."""
        element = f"document.querySelector({json.dumps(selector)})"
        x, y = self.js(f"(b => [b.x + b.width / 2, b.y + b.height / 2])({element}.getBoundingClientRect())")
        self.page("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        self.page("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", buttons=1, clickCount=1)
        for _ in range(abs(dx) // 3):
            x += 3 if dx > 0 else -3
            self.page("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="left", buttons=1)
            end = time.monotonic() + 5
            while not self.js(f"document.elementFromPoint({x}, {y}) === {element}") and time.monotonic() < end:
                time.sleep(0.05)
        self.page("Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button="left", clickCount=1)
        self.page("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=1)

    def click(self, element: str) -> None:
        """A mouse click at the middle of the element (JavaScript for it), scrolled into view first."""
        box = self.js(f"(e => {{ if (!e) return null; e.scrollIntoView({{block: 'center'}}); "
                      f"const b = e.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; }})"
                      f"({element})")
        if box is None:
            raise SystemExit(f"nothing to click: {element}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
        time.sleep(0.7)

    def toggle_columns(self, names: list[str]) -> None:
        """What a user does to show or hide a table's columns: open its Columns menu, click each name (typed into
        the menu's search box first where it has one: the runs table's lists only what fits), close the menu."""
        self.click("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Columns'))")
        box = "document.querySelector('input[placeholder=\"Search columns\"]')"
        for name in names:
            if self.js(f"!!{box}"):
                self.js(f"{box}.focus(); {box}.select()")
                self.page("Input.insertText", text=name)
                time.sleep(1)
            self.click(by_text(name))  # the menu is drawn last: the last element with that text is its entry
        self.page("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27)
        time.sleep(1)

    def set_local_storage(self, items: dict[str, str]) -> None:
        self.js(";".join(f"localStorage.setItem({json.dumps(k)}, {json.dumps(v)})" for k, v in items.items()))

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.page("Page.captureScreenshot", format="png")["data"]))
        print(f"wrote {path}")

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait(timeout=30)
        os.close(self._cmd_w)
        os.close(self._res_r)


COLLAPSE_SIDEBAR = "document.querySelector('[aria-label=\"Toggle sidebar\"]')?.click()"
SHOW_MORE = "[...document.querySelectorAll('button, a, span')].find(e => e.innerText === 'Show more')?.click()"


def by_text(text: str, selector: str = "*") -> str:
    """JavaScript for the innermost element matching selector whose text is text."""
    return (f"[...document.querySelectorAll({json.dumps(selector)})]"
            f".filter(e => e.innerText && e.innerText.trim() === {json.dumps(text)}).pop()")


def shoot_page(browser: str, base: str, out: Path, tmp: Path, name: str, url: str, ready: str, width: int,
               height: int, columns: list[str] | None = None, expand: str = "", click: str | None = None,
               search: str | None = None, drag: tuple[str, int] | None = None) -> None:
    """One page in a fresh browser profile (the assistant panel closed), loaded until it shows ready, then what a
    user would do: show or hide columns, expand a sweep's parent, click (javascript), type, drag; then the
    screenshot."""
    chrome = Chromium(browser, tmp / f"profile-{name}", width, height)
    try:
        chrome.goto(f"{base}/health", "OK", timeout=30)  # same origin, so localStorage can be written
        chrome.set_local_storage(NO_ASSISTANT)
        chrome.goto(f"{base}/{url}", ready)
        if columns:
            chrome.toggle_columns(columns)
        if expand:  # the + button in the row of the run named so
            row = by_text(expand, "span.ag-cell-value span")
            chrome.click(f"{row}.closest('.ag-cell-value').querySelector('button')")
        if click:
            chrome.js(click)
            time.sleep(2)
        if search:  # type into the first search box (the run page's metrics filter), as a user would
            chrome.js("document.querySelector('input[placeholder^=\"Search\"]').focus()")
            chrome.page("Input.insertText", text=search)
            time.sleep(2)
        if drag:
            chrome.drag(*drag)
            time.sleep(1)
        chrome.screenshot(out / name)
    finally:
        chrome.close()


def compare_url(experiment_id: str, run_ids: list[str]) -> str:
    from urllib.parse import quote

    return f"#/compare-runs?runs={quote(json.dumps(run_ids))}&experiments={quote(json.dumps([experiment_id]))}"


def shoot_runs(browser: str, base: str, store: str, out: Path, tmp: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    t2 = client.get_experiment_by_name("reproduce_table2")
    t2_run = client.search_runs([t2.experiment_id], order_by=["attributes.start_time ASC"])[0]
    opt = client.get_experiment_by_name("optimize_instructions")
    runs = client.search_runs([opt.experiment_id], order_by=["attributes.start_time ASC"])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    child = max(children, key=lambda r: r.data.metrics["summary.final_heldout_spearman"])
    prompt = f"face-opt-relevance-sweep-alpha-beam-{parent.info.run_id[:8]}"  # one candidates prompt per sweep, aspect
    shot = functools.partial(shoot_page, browser, base, out, tmp)

    shot("sweep_runs.png", f"#/experiments/{opt.experiment_id}/runs", parent.data.tags["mlflow.runName"][:6], 1800,
         470, [*SWEPT, *OPT_METRICS], expand=parent.info.run_name, click=COLLAPSE_SIDEBAR)
    shot("sweep_charts.png", f"#/experiments/{opt.experiment_id}/runs?compareRunsMode=CHART",
         parent.info.run_name[:6], 1500, 820, expand=parent.info.run_name, click=COLLAPSE_SIDEBAR)
    shot("sweep_compare.png", compare_url(opt.experiment_id, [r.info.run_id for r in children]),
         "Parallel Coordinates", 1500, 760)
    shot("sweep_parent.png", f"#/experiments/{opt.experiment_id}/runs/{parent.info.run_id}", "Every job", 1500, 1000,
         click=f"{COLLAPSE_SIDEBAR}; {SHOW_MORE}")
    shot("sweep_child_run.png", f"#/experiments/{opt.experiment_id}/runs/{child.info.run_id}",
         "summary.final_heldout_spearman", 1700, 1000, click=COLLAPSE_SIDEBAR, search="summary")
    shot("prompt_versions.png", f"#/prompts/{prompt}", "initial", 1700, 640)
    shot("set_versions.png", "#/prompts/face-opt-relevance-set", "best", 1700, 460)
    shot("runs_table.png", f"#/experiments/{t2.experiment_id}/runs", t2_run.data.tags["mlflow.runName"][:12], 1600,
         420, ["method.particle_agg", *TABLE2_METRICS], click=COLLAPSE_SIDEBAR)
    shot("run_page.png", f"#/experiments/{t2.experiment_id}/runs/{t2_run.info.run_id}", "Registered prompts",
         1500, 1000)
    shot("prompts.png", "#/prompts", prompt, 1500, 800)

    sweep3 = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and "beta" in r.info.run_name)
    shot("sweep3_runs.png", f"#/experiments/{opt.experiment_id}/runs", sweep3.info.run_name[:6], 1500, 560,
         expand=sweep3.info.run_name, click=COLLAPSE_SIDEBAR)
    ev = client.get_experiment_by_name("face_evaluate")
    v1 = next(r for r in client.search_runs([ev.experiment_id]) if r.data.tags.get("face.short_name") == "v1")
    shot("evaluate_runs.png", f"#/experiments/{ev.experiment_id}/runs", "v1 ·", 1600, 380,
         ["summary.relevance", "summary.dialogue_overall"], click=COLLAPSE_SIDEBAR)
    shot("evaluate_run.png", f"#/experiments/{ev.experiment_id}/runs/{v1.info.run_id}", "summary.relevance", 1500,
         1000, click=COLLAPSE_SIDEBAR)
    cmp = client.get_experiment_by_name("face_compare")
    [cmp_run] = client.search_runs([cmp.experiment_id])
    shot("compare_run.png", f"#/experiments/{cmp.experiment_id}/runs/{cmp_run.info.run_id}", "verdict", 1500, 1000,
         click=f"{COLLAPSE_SIDEBAR}; {SHOW_MORE}")


def shoot_face(browser: str, base: str, store: str, out: Path, tmp: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name(NOTEBOOK_EXPERIMENT)
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]  # the evaluation
    traces = client.search_traces(locations=[exp.experiment_id], run_id=run.info.run_id)
    # the three-turn conversation: its session page shows every turn's face_relevance above the session's verdicts
    session = next(s for t in traces if (s := t.info.trace_metadata["mlflow.trace.session"]).startswith("heist-"))
    shot = functools.partial(shoot_page, browser, base, out, tmp)
    ungroup = "document.querySelector('[aria-label=\"Toggle session grouping\"][aria-pressed=\"true\"]')?.click()"
    expand = ("document.querySelectorAll('[data-component-id=\"shared.model-trace-explorer.toggle-assessment-expanded"
              "\"]').forEach(b => b.click())")
    shot("face_assessments.png", f"#/experiments/{exp.experiment_id}/runs/{run.info.run_id}/traces", session, 1800, 780,
         ["Trace ID", "Execution time", "State"], click=f"{COLLAPSE_SIDEBAR}; {ungroup}")
    shot("face_assessment_detail.png", f"#/experiments/{exp.experiment_id}/chat-sessions/{session}",
         "face_dialogue_overall", 1600, 1000, click=f"{COLLAPSE_SIDEBAR}; {expand}",
         drag=(".react-resizable > [handleaxis=w]", -200))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--browser", default=shutil.which("chromium") or shutil.which("google-chrome") or "chromium")
    ap.add_argument("--only", choices=["runs", "face"], help="only the runs and prompts shots (the jobs) or only "
                                                              "FACE's assessments (the notebook); default both")
    ap.add_argument("--store", help="shoot an existing store (sqlite:///...) that already holds these jobs' runs "
                                    "(and the notebook's experiment) instead of running them again")
    args = ap.parse_args()
    parts = [args.only] if args.only else ["runs", "face"]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        store = args.store or f"sqlite:///{tmp / 'mlflow.db'}"
        if not args.store:
            if "runs" in parts:
                run_jobs(store, tmp)
            if "face" in parts:
                run_notebook(store, tmp)
        port = free_port()
        server = subprocess.Popen([str(BIN / "mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1",
                                   "--port", str(port), "--workers", "1"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL,
                                  env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(240):
                try:
                    urllib.request.urlopen(f"{base}/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                raise SystemExit("mlflow ui did not start")
            if "runs" in parts:
                shoot_runs(args.browser, base, store, args.out, tmp)
            if "face" in parts:
                shoot_face(args.browser, base, store, args.out, tmp)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
