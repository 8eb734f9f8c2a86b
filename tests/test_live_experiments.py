"""Every live experiment on 2 conversations of CRSArena-Eval with the scripted LLM: crsarena_main end to end (run
file, per-particle file, MLflow), the ablations, dry runs (the Batch API's price), the Batch API against HTTP, own
conversations without labels, and the estimate's particle rate against what is sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from face.data import CRSARENA_EVAL
from face.datasets.crsarena import load_conversations
from face.runfile import read_run_file
from face.testing.scripted import ScriptedServer

SMALL_LIVE = ["llm=fake", "dataset.limit=2", "metaeval.n_boot=20", "method.instructions.max=2",
              "method.scoring.n=2",
              "method.particles.k=3", "aspects=[relevance,dialogue_overall]"]



def _detail(cfg) -> list[dict]:
    lines = (Path(cfg.paths.output_dir) / "particle_scores.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_crsarena_main_end_to_end_writes_run_file_and_per_particle_file(run_experiment):
    from mlflow.tracking import MlflowClient

    ran = run_experiment("experiment=crsarena_main", *SMALL_LIVE)
    cfg, out = ran.cfg, ran.experiment
    run_dir = Path(cfg.paths.output_dir)
    preds = read_run_file(run_dir / "run_file.json")
    assert set(preds.turn["aspect"]) == {"relevance"} and set(preds.dialogue["aspect"]) == {"dialogue_overall"}
    detail = [json.loads(line) for line in (run_dir / "particle_scores.jsonl").read_text().splitlines()]
    particles = [json.loads(line) for line in (run_dir / "particles.jsonl").read_text().splitlines()]
    n_particles = sum(len(p["particles"]) for p in particles)
    assert len(detail) == 2 * 2 * n_particles  # 2 aspects × 2 instructions × every particle
    d0 = detail[0]
    assert {"score", "samples", "n_valid", "fallback", "particle", "instruction_id"} <= set(d0)
    assert len(d0["samples"]) == 2 and d0["particle"]["mention"]
    # trace a turn score back to its particles: mean over particles × instructions
    t = preds.turn.iloc[0]
    mine = [d["score"] for d in detail if d["aspect"] == "relevance" and d["conv_id"] == t.conv_id
            and d["turn_ind"] == t.turn_ind and d["score"] is not None]
    assert t.pred == pytest.approx(sum(mine) / len(mine))
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("crsarena_main").experiment_id])
    numbers = json.loads(Path(client.download_artifacts(run.info.run_id, "numbers.json")).read_text())
    assert numbers["llm_http_requests"] > 0 and "particles.per_turn" in numbers  # counters: not MLflow metrics
    assert run.data.tags["prompt.relevance"].startswith("prompts:/face-relevance-released/")
    assert "scripted-model" in (out.out_dir / "vs_published.md").read_text()


def test_ablation_no_particles_scores_whole_turns(run_experiment):
    # the pooled split only: no per-split figure to draw (what is checked here is what was scored)
    ran = run_experiment("experiment=ablation_no_particles", *SMALL_LIVE, "metaeval.splits=[all]", tracking=False)
    cfg = ran.cfg
    detail = _detail(cfg)
    # the first 2 conversations have 11 assistant turns: 2 instructions × (11 turns + 2 dialogues) = 26 units
    assert len(detail) == 2 * (11 + 2)
    assert {d["particle_ind"] for d in detail} == {-1}
    assert {d["turn_ind"] for d in detail if d["aspect"] == "dialogue_overall"} == {-1}
    assert not (Path(cfg.paths.output_dir) / "particles.jsonl").exists()


@pytest.mark.slow  # seconds of processes, servers or rendering: the fast suite stays within 45 s
def test_ablation_no_optimization_uses_the_initial_instruction(run_experiment):
    ran = run_experiment("experiment=ablation_no_optimization", *SMALL_LIVE, tracking=False)
    cfg, out = ran.cfg, ran.experiment
    detail = _detail(cfg)
    assert {d["instruction_id"] for d in detail} == {"initial"}
    assert "FACE w/o train" in (out.out_dir / "vs_published.md").read_text()


@pytest.mark.slow
def test_ablation_scoring_compares_estimators_and_cost(run_experiment, data_dir):
    from scipy import stats

    ran = run_experiment("experiment=ablation_scoring", *SMALL_LIVE, tracking=False)
    out = ran.experiment
    usage = out.tables["variants_llm_usage"].frame.set_index("variant")
    assert list(usage.index) == ["sampling_n1", "sampling_n5", "sampling_n20", "logprobs"]
    assert set(out.results["variant"]) == set(usage.index)
    # n=5 reuses the cached n=1 sample; n=20 reuses the 5
    assert usage.loc["sampling_n5", "llm_cache_hits"] > 0
    # every variant's turn-level correlations over the 11 turns are numbers, and each estimator's are its own
    turn = out.results[(out.results["level"] == "turn") & (out.results["split"] == "all")]
    by_variant = turn.set_index(["variant", "coefficient"])["value"]
    assert turn["value"].notna().all() and len(turn) == 4 * 3 and (turn["n"] == 11).all()
    assert by_variant["sampling_n1"].tolist() != by_variant["sampling_n20"].tolist()
    # the last variant's (logprobs) particle scores, aggregated by hand, give its Pearson against the labels
    detail = [d for d in _detail(ran.cfg) if d["aspect"] == "relevance"]
    assert {d["estimator"] for d in detail} == {"logprobs"}
    turns: dict[tuple[str, int], list[float]] = {}
    for d in detail:
        if d["score"] is not None:
            turns.setdefault((d["conv_id"], d["turn_ind"]), []).append(d["score"])
    convs = {c.conv_id: c for c in load_conversations(data_dir / CRSARENA_EVAL)[:2]}
    human = {k: next(t.labels["relevance"] for t in convs[k[0]].turns if t.turn_ind == k[1]) for k in turns}
    keys = sorted(turns)
    r = stats.pearsonr([sum(turns[k]) / len(turns[k]) for k in keys], [human[k] for k in keys])[0]
    assert by_variant["logprobs", "pearson"] == pytest.approx(r, abs=1e-9)


@pytest.mark.slow
def test_ablation_particles_source(run_experiment):
    ran = run_experiment("experiment=ablation_particles_source", *SMALL_LIVE, tracking=False)
    out = ran.experiment
    assert set(out.results["variant"]) == {"ours", "released"}


def test_dry_run_sends_nothing_and_prints_the_estimate(run_experiment, capsys):
    ran = run_experiment("experiment=crsarena_main", "llm=fake", "llm.dry_run=true", "dataset.limit=2",
                         tracking=False)
    out = ran.experiment
    assert out.dry_run
    printed = capsys.readouterr().out
    assert "Cost estimate before sending anything" in printed and "score:relevance" in printed


def test_a_batch_api_dry_run_prices_at_half_the_list_price(run_experiment, capsys):
    import pandas as pd

    costs = {}
    for batch in ("false", "true"):
        ran = run_experiment("experiment=crsarena_main", "llm=openai", "llm.dry_run=true", f"llm.batch={batch}",
                             "dataset.limit=2", "aspects=[dialogue_overall]", "method.particles.source=released",
                             tracking=False, run_dir=f"batch_{batch}")
        cfg, out = ran.cfg, ran.experiment
        assert out.dry_run
        costs[batch] = pd.read_csv(Path(cfg.paths.output_dir) / "cost_estimate.csv")
    assert (costs["true"]["http_requests"] == costs["false"]["http_requests"]).all()
    assert costs["true"]["cost_usd"].iloc[-1] == pytest.approx(costs["false"]["cost_usd"].iloc[-1] / 2)
    assert costs["true"]["cost_usd"].iloc[-1] > 0
    assert "OpenAI Batch API price: 0.5 × list price" in capsys.readouterr().out


@pytest.mark.slow
def test_a_live_run_through_the_batch_api_writes_the_same_run_file_as_over_http(run_experiment, tmp_path):
    with ScriptedServer() as info:
        files = {}
        for batch in ("true", "false"):
            run_experiment("experiment=crsarena_main", "llm=openai_compatible", f"llm.base_url={info.base_url}",
                           f"llm.model={info.model}", f"llm.batch={batch}", "llm.batch_poll_s=0.05",
                           "dataset.limit=2", "aspects=[dialogue_overall]", "run_size=tiny",
                           f"paths.cache_dir={tmp_path / batch}-cache", tracking=False, run_dir=batch)
            files[batch] = (tmp_path / batch / "run_file.json").read_bytes()
        assert len(list((tmp_path / "true-cache" / "llm" / "batches").glob("batch-*.output.jsonl"))) == 2
    assert files["true"] == files["false"]  # decomposition and scoring, each one batch job


def test_own_conversations_without_labels_get_predictions_only(run_experiment, tmp_path):
    convs = [{"conv_id": "mycrs_run1_a", "dialogue": [
        {"turn_ind": 0, "role": "USER", "utterance": "Any good heist movies?"},
        {"turn_ind": 1, "role": "ASST", "utterance": "Try Heat (1995). Do you like older films?"},
        {"turn_ind": 2, "role": "USER", "utterance": "Yes, Heat sounds great, thanks!"}]}]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(convs))
    ran = run_experiment("experiment=crsarena_main", "llm=fake", f"dataset.file={path}",
                         "method.instructions.max=1",
                         "method.scoring.n=1", "method.particles.k=1", "aspects=[relevance,dialogue_overall]",
                         tracking=False)
    out = ran.experiment
    preds = read_run_file(out.files["run_file"])
    assert list(preds.turn["conv_id"]) == ["mycrs_run1_a"] and len(preds.dialogue) == 1


@pytest.mark.slow
def test_the_estimate_states_its_particle_rate_and_at_the_actual_rate_equals_what_is_sent(run_experiment, capsys):
    """Issue 29: before the decomposition the estimate assumes the released particles' rate and says so; after it,
    the run restates the scoring counts at the actual rate, and with no redraw and no cache hit what it sends is
    exactly that (the same arithmetic: face/llm/sizes.py)."""
    import pandas as pd

    ran = run_experiment("experiment=crsarena_main", *SMALL_LIVE, tracking=False)
    cfg = ran.cfg
    out = capsys.readouterr().out
    run_dir = Path(cfg.paths.output_dir)
    est = pd.read_csv(run_dir / "cost_estimate.csv").set_index("stage")
    assumed = est.loc["score:relevance", "particles_per_turn"]
    assert assumed > 0 and est.loc["decompose", "samples"] == est.loc["decompose", "units"] * 3  # k = 3
    rate = re.search(r"particles: ([\d.]+) per turn \(the estimate assumed ([\d.]+)\)", out)
    assert rate and float(rate.group(2)) == pytest.approx(assumed, abs=1e-3)
    particles = [json.loads(x) for x in (run_dir / "particles.jsonl").read_text().splitlines()]
    assert float(rate.group(1)) == pytest.approx(sum(len(p["particles"]) for p in particles) / len(particles), abs=1e-3)
    usage = json.loads((run_dir / "llm_usage.json").read_text())["totals"]
    assert usage["answer_retries"] == 0 and usage["cache_hits"] == 0
    sent = re.search(r"LLM sent: ([\d,]+) HTTP requests, ([\d,]+) samples .*; at the actual particle rate: "
                     r"([\d,]+) \(\+0\.0%\), ([\d,]+) \(\+0\.0%\)", out)
    assert sent, out[-2000:]
    http, samples, est_http, est_samples = (int(x.replace(",", "")) for x in sent.groups())
    assert (http, samples) == (est_http, est_samples) == (usage["http_requests"], usage["samples"])
