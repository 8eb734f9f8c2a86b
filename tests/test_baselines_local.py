"""Slow: every LLM baseline (crsarena_baselines) and both transfer experiments end to end on the embedded
local LLM (llama.cpp + SmolLM2-135M), on a slice, with MLflow and the Prompt Registry. The tiny model's
numbers carry no signal; this shows that the pipelines run for real."""

from __future__ import annotations

import importlib
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow import genai

from face.runfile import read_run_file

pytestmark = pytest.mark.slow
# CPU time: a 135M model's reasoned replies are capped (the paper setting is 768 tokens)
SHORT_COT = ("baselines.llm_cot_icl.max_tokens=120", "baselines.llm_cot_icl.k_examples=1")


def _run(cfg):
    return importlib.import_module(cfg.runner).run(cfg)


def test_crsarena_baselines_on_the_local_llm(cfg_factory):
    cfg = cfg_factory("experiment=crsarena_baselines", "llm=local", "dataset.limit=1",
                      "aspects=[efficiency]", "metaeval.n_boot=20", *SHORT_COT)  # one dialogue-level item: CI time
    out = _run(cfg)
    run_dir = Path(cfg.paths.output_dir)
    for name in ("llm_direct", "llm_cot_icl", "g_eval"):
        scores = pd.read_csv(run_dir / f"scores_{name}.csv")
        assert len(scores) == 1  # one dialogue
        valid = int(scores["score"].notna().sum())
        if valid:  # the tiny model may give no valid reasoned answer at all: an empty run file, refused on reading
            preds = read_run_file(run_dir / f"run_file_{name}.json")
            assert len(preds.turn) + len(preds.dialogue) == valid
        assert scores["invalid_samples"].ge(0).all()
    assert pd.read_csv(run_dir / "scores_llm_direct.csv")["score"].notna().mean() >= 0.8  # schema-constrained
    assert set(out["long"][out["long"]["source"].str.startswith("ours")]["method"]) >= {"LLM-Direct", "G-Eval"}
    mlflow.set_tracking_uri(cfg.tracking.tracking_uri)
    for name in ("llm-direct", "llm-cot-icl", "g-eval", "g-eval-steps"):
        assert genai.load_prompt(f"prompts:/face-efficiency-{name}@latest", allow_missing=True) is not None


@pytest.mark.parametrize("corpus", ["topical_chat", "persona_chat"])
def test_transfer_on_the_local_llm(cfg_factory, corpus):
    cfg = cfg_factory(f"experiment=transfer_{corpus}", "llm=local", "dataset.limit=2", "aspects=[overall]",
                      "metaeval.n_boot=20", *SHORT_COT, tracking=False)
    out = _run(cfg)
    res = out["results"]
    assert set(res["method"]) == {"face_transfer", "llm_direct", "llm_cot_icl", "g_eval"}
    assert (res[res["level"] == "turn"]["n"] + res[res["level"] == "turn"]["n_missing"] == 2).all()
    assert "dialogue_overall" in out["labels"]["face_transfer"]
