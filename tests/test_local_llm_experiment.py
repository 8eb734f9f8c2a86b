"""Slow: a live FACE experiment end to end on the embedded local LLM (llama.cpp + SmolLM2-135M).

The tiny model's numbers carry no signal; this proves the whole pipeline runs for real."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from scipy import stats

import face.llm.local
import face.runner
from face.data import CRSARENA_EVAL

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # the embedded LLM on both cores: one at a time


class _LaunchSpy:
    """face.llm.local's subprocess module, recording the pid of every process it starts in a new session (the
    launcher: its llama.cpp server runs in the same session, so the session id is the launcher's pid)."""

    def __init__(self) -> None:
        self.sessions: list[int] = []

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def Popen(self, *args, **kwargs):  # subprocess's name
        process = subprocess.Popen(*args, **kwargs)
        if kwargs.get("start_new_session"):
            self.sessions.append(process.pid)
        return process


def _alive_in(sessions: list[int]) -> set[int]:
    """The live (not zombie) processes in these sessions: only this test's, whatever else runs on the machine."""
    alive = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
            except OSError:
                continue
            if int(fields[3]) in sessions and fields[0] != "Z":
                alive.add(int(d.name))
    return alive


@pytest.mark.usefixtures("mlflow_store")
def test_ablation_no_particles_on_two_conversations_with_the_local_llm(cfg_factory, data_dir, monkeypatch):
    from mlflow.tracking import MlflowClient

    spy = _LaunchSpy()
    monkeypatch.setattr(face.llm.local, "subprocess", spy)
    # one turn-level and one dialogue-level aspect: the other five are the same prompts with other instructions
    cfg = cfg_factory("experiment=ablation_no_particles", "llm=local", "dataset.limit=2", "metaeval.n_boot=50",
                      "aspects=[relevance,dialogue_overall]")
    out = face.runner.run(cfg).experiment
    run_dir = Path(cfg.paths.output_dir)
    detail = [json.loads(line) for line in (run_dir / "particle_scores.jsonl").read_text().splitlines()]
    # 1 turn aspect × 11 assistant turns + 1 dialogue aspect × 2 dialogues, 1 instruction, 1 sample
    assert len(detail) == 11 + 2 and {d["aspect"] for d in detail} == {"relevance", "dialogue_overall"}
    valid = [d for d in detail if d["score"] is not None]
    assert len(valid) >= 0.8 * len(detail)  # schema-constrained answers are nearly always valid
    assert all(0 <= d["score"] <= 4 for d in valid)
    # whole turns, 1 instruction, 1 sample: a turn's prediction is its one score; correlate with the raw labels
    raw = json.loads((data_dir / CRSARENA_EVAL).read_text())[:2]
    labels = {(c["conv_id"], t["turn_ind"]): t["turn_level_aggregated"]["relevance"] for c in raw
              for t in c["dialogue"] if "relevance" in (t.get("turn_level_aggregated") or {})}
    pairs = [(d["score"], labels[d["conv_id"], d["turn_ind"]]) for d in valid if d["aspect"] == "relevance"]
    r = out.results.set_index(["level", "aspect", "split", "coefficient"])
    row = r.loc["turn", "relevance", "all", "pearson"]
    assert row["n"] == len(pairs) and row["n_missing"] == len(labels) - len(pairs)
    pred, human = zip(*pairs)
    if len(set(pred)) > 1 and len(set(human)) > 1:
        assert row["value"] == pytest.approx(stats.pearsonr(pred, human)[0], abs=1e-9)
    else:  # a constant side has no correlation
        assert math.isnan(row["value"])
    usage = json.loads((run_dir / "llm_usage.json").read_text())
    assert usage["totals"]["requests"] == len(detail) and usage["totals"]["failures"] == 0
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("ablation_no_particles").experiment_id])
    assert run.data.params["llm.backend"] == "local"
    assert "smollm2" in (out.out_dir / "vs_published.md").read_text().lower()
    assert len(spy.sessions) == 1 and not _alive_in(spy.sessions)  # one server started, and stopped with its launcher
