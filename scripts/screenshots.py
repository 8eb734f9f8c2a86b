"""Screenshots of the MLflow UI for the README: the runs table, a run page and the prompts page.

    python scripts/screenshots.py [--out docs/screenshots] [--browser chromium]

Runs three jobs into a fresh MLflow store (reproduce_table2, the same with method.particle_agg=median, and
system_level; released scores, no LLM), starts `mlflow ui` on a free loopback port, renders each page in
headless Chromium and stops the server. Needs Chromium (Debian: apt-get install chromium).
"""

from __future__ import annotations

import argparse
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_jobs(store: str, tmp: Path) -> None:
    jobs = [["experiment=reproduce_table2"], ["experiment=reproduce_table2", "method.particle_agg=median"],
            ["experiment=system_level"]]
    for i, job in enumerate(jobs):
        subprocess.run([sys.executable, "scripts/run.py", *job, f"tracking.tracking_uri={store}",
                        f"tracking.artifact_location={tmp / 'artifacts'}", f"paths.results_dir={tmp / 'results'}",
                        f"hydra.run.dir={tmp / f'run{i}'}", "metaeval.n_boot=200"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)


def shoot(browser: str, url: str, path: Path, profile: Path) -> None:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1400,900",
                    "--virtual-time-budget=20000", f"--screenshot={path}", url],
                   check=True, capture_output=True, timeout=180)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--browser", default=shutil.which("chromium") or shutil.which("google-chrome") or "chromium")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        store = f"sqlite:///{tmp / 'mlflow.db'}"
        run_jobs(store, tmp)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=store)
        exp = client.get_experiment_by_name("reproduce_table2")
        run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])[0]
        port = free_port()
        server = subprocess.Popen([str(BIN / "mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1",
                                   "--port", str(port), "--workers", "1"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL,
                                  env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(120):
                try:
                    urllib.request.urlopen(f"{base}/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                raise SystemExit("mlflow ui did not start")
            shoot(args.browser, f"{base}/#/experiments/{exp.experiment_id}/runs", args.out / "runs_table.png",
                  tmp / "profile1")
            shoot(args.browser, f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}",
                  args.out / "run_page.png", tmp / "profile2")
            shoot(args.browser, f"{base}/#/prompts", args.out / "prompts.png", tmp / "profile3")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
