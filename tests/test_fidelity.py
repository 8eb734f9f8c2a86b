"""The live method as the paper ran it: instruction sets of the ablations, empty turns, statistics on small
data, paired differences, and what one log-probability call saves over five samples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from face.data.schema import Conversation, Turn
from face.datasets.crsarena import ASPECTS
from face.metaeval import bootstrap_ci, cluster_weights, paired_difference, system_correlations
from face.pipeline.method import Face, fill_empty
from face.predictions import Predictions


def test_face_wo_train_is_the_generic_initial_instruction_and_ours_is_named_apart(data_dir):
    generic = Face(instructions={"source": "initial"}).instruction_set(data_dir, ASPECTS["efficiency"])
    ours = Face(instructions={"source": "initial_aspect"}).instruction_set(data_dir, ASPECTS["efficiency"])
    assert [i.instruction_id for i in generic] == ["initial"] and "Step 3" in generic[0].text
    assert '"efficiency"' in generic[0].text
    assert ours[0].instruction_id == "initial_aspect" and ours[0].text != generic[0].text


def test_whole_turn_scoring_rewords_the_released_instructions(data_dir):
    particle = Face().instruction_set(data_dir, ASPECTS["relevance"])
    whole = Face(unit="whole").instruction_set(data_dir, ASPECTS["relevance"])
    assert [i.instruction_id for i in whole] == [i.instruction_id for i in particle]
    assert any("nugget" in i.text.lower() for i in particle)
    assert not any("nugget" in i.text.lower() or "particle" in i.text.lower() for i in whole)
    assert any("assistant turn" in i.text for i in whole)


def test_turns_without_particles_score_the_lowest_value_like_the_authors():
    convs = [Conversation("c", (Turn(0, "USER", "hi"), Turn(1, "ASST", "a"), Turn(2, "USER", "b"),
                                Turn(3, "ASST", "c")), system="s")]
    preds = Predictions(pd.DataFrame([("relevance", "c", 1, 1.5)], columns=["aspect", "conv_id", "turn_ind", "pred"]),
                        pd.DataFrame(columns=["aspect", "conv_id", "pred"]))
    out, n = fill_empty(preds, [ASPECTS["relevance"], ASPECTS["dialogue_overall"]], convs)
    assert n == 2
    assert out.turn.set_index("turn_ind")["pred"].to_dict() == {1: 1.5, 3: 0.0}
    assert out.dialogue["pred"].tolist() == [0.0]


def test_no_interval_from_a_single_conversation():
    ci = bootstrap_ci(np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4]), np.array(["a"] * 4), n_boot=200)
    assert all(np.isnan(lo) and np.isnan(hi) for lo, hi in ci.values())
    two = bootstrap_ci(np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4]), np.array(["a", "a", "b", "b"]), 200)
    assert not np.isnan(two["pearson"][0])


def test_no_system_interval_when_a_system_has_one_conversation():
    df = pd.DataFrame({"conv_id": list("abcde"), "system": ["s1", "s1", "s2", "s2", "s3"],
                       "pred": [1.0, 3, 2, 2, 5], "human": [0.0, 2, 1, 1, 3]})
    out = system_correlations(df, n_boot=100)
    assert np.isnan(out["pearson"][2]) and not np.isnan(out["pearson"][0])


def test_paired_difference_equals_scipy_on_the_same_resamples():
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(30), 3)
    human = rng.integers(0, 3, 90).astype(float)
    a, b = human + rng.normal(0, 0.8, 90), human + rng.normal(0, 1.2, 90)
    diff, lo, hi = paired_difference(a, b, human, clusters, "spearman", n_boot=300, seed=7)
    assert diff == pytest.approx(stats.spearmanr(a, human)[0] - stats.spearmanr(b, human)[0])
    w = cluster_weights(clusters, 300, np.random.default_rng(7))  # the same resamples, expanded by hand
    boot = []
    for row in w.astype(int):
        idx = np.repeat(np.arange(90), row)
        boot.append(stats.spearmanr(a[idx], human[idx])[0] - stats.spearmanr(b[idx], human[idx])[0])
    assert (lo, hi) == pytest.approx(tuple(np.percentile(boot, [2.5, 97.5])))


def test_one_logprobs_call_replaces_five_samples_on_the_scripted_server(tmp_path, data_dir):
    """Measured on the server: the same units with reasoning cost 5 completions each when sampled (n=5) and
    1 with log-probabilities, and both give a score for every unit."""
    from helpers import llm_config

    from face.data import CRSARENA_EVAL, RELEASED_PARTICLES
    from face.data.schema import Instruction
    from face.datasets.crsarena import load_conversations
    from face.datasets.face_released import load_released_particles
    from face.llm import make_client
    from face.pipeline.particles import from_released
    from face.pipeline.scoring import ScoringSpec, plan, score, units_for
    from face.testing.scripted import InProcessServer

    convs = load_conversations(data_dir / CRSARENA_EVAL)[:1]
    decomps = from_released([r for r in load_released_particles(data_dir / RELEASED_PARTICLES)
                             if r.conv_id == convs[0].conv_id])
    units = units_for(ASPECTS["relevance"], convs, decomps)[:4]
    completions = {}
    for estimator in ("sampling", "logprobs"):
        srv = InProcessServer(responder=lambda b: f'Step 1: it fits.\n{{"score": {(b.get("seed") or 0) % 3}}}')
        with srv:
            cfg = llm_config(server=srv, cache_dir=str(tmp_path / estimator), n_per_request=1)
            spec = ScoringSpec(estimator, n=5, draws={"rounds": 1}, fallback="drop")
            planned = plan(units, [Instruction("i", "Grade it.", 1)], {c.conv_id: c for c in convs}, spec, True)
            with make_client(cfg) as client:
                recs = score(client, planned, spec)
            completions[estimator] = sum(r.get("n", 1) for r in srv.ok_requests())
        assert all(r.n_valid >= 1 for r in recs)  # reasoning, then the JSON answer, read either way
    assert completions == {"sampling": 5 * len(units), "logprobs": len(units)}


@pytest.mark.parametrize("job", [
    ("experiment=crsarena_main",),
    ("experiment=crsarena_baselines",),  # the baselines run first: LLM-Direct is refused
    ("experiment=optimize_instructions", "aspects=[relevance]", "dataset.limit=8", "method.particles.source=released"),
])
def test_a_budget_below_the_estimate_refuses_to_start_every_llm_job(cfg_factory, job):
    """One gate for live FACE, the LLM baselines and the optimizer: refused before a scoring request is sent."""
    from pathlib import Path

    import face.runner
    from face.errors import ConfigError

    cfg = cfg_factory("llm=fake", "run_size=tiny", "dataset.limit=1", "llm.price_input_per_mtok=1000",
                      "llm.max_cost_usd=0.01", *job, tracking=False)
    with pytest.raises(ConfigError, match=r"llm.max_cost_usd=0.01 is below the cost estimate \$"):
        face.runner.run(cfg)
    run_dir = Path(cfg.paths.output_dir)
    assert not (run_dir / "run_file.json").exists() and not list(run_dir.glob("scores_*.csv"))
    assert not list(run_dir.glob("llm_usage*.json"))  # no job got as far as its usage report
