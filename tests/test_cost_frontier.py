"""experiment=cost_frontier: correlations of k-instruction subsets of the released judgements against hand-computed
values (raw files, plain Python, scipy) and face.metaeval's own intervals; the cost arithmetic against the LLM
prices and the method's assumed answer sizes; the Pareto set against a hand-marked one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import raw_labels, released_particle_scores
from scipy import stats

import face.runner
from face.data import released_scores_file
from face.experiments.cost_frontier import frontier
from face.pipeline.aggregate import random_instruction_subsets

N_CONVS, SEEDS, BOOT = 60, 3, 200


def _preds(data_dir: Path, aspect: str, level: str, subset: list[str], conv_ids: set[str]) -> dict:
    """Per turn (or conversation): the mean over its particles of each particle's mean over ``subset``, rounded to
    10 decimals like every prediction of the project."""
    particles = released_particle_scores(data_dir, aspect, level, conv_ids,
                                         lambda by_instruction: np.mean([by_instruction[i] for i in subset]))
    return {k: round(float(np.mean(v)), 10) for k, v in particles.items()}


def _by_hand(data_dir: Path, aspect: str, level: str, subset: list[str], coefficient: str) -> tuple[float, float]:
    """(item-level, system-level) correlation of one subset's predictions with the labels of the first conversations;
    a system is the conversation id without its uuid."""
    labels = raw_labels(data_dir, N_CONVS, aspect, level)
    preds = _preds(data_dir, aspect, level, subset, {k[0] if level == "turn" else k for k in labels})
    df = pd.DataFrame([(k[0] if level == "turn" else k, preds[k], h) for k, h in labels.items() if k in preds],
                      columns=["conv_id", "pred", "human"])
    df["system"] = df["conv_id"].str.rsplit("_", n=1).str[0]
    means = df.groupby("system")[["pred", "human"]].mean().round(10)
    fn = stats.spearmanr if coefficient == "spearman" else stats.pearsonr
    return float(fn(df["pred"], df["human"])[0]), float(fn(means["pred"], means["human"])[0])


@pytest.fixture(scope="module")
def ran(tmp_path_factory, data_dir):
    from helpers import make_cfg

    cfg = make_cfg(tmp_path_factory.mktemp("frontier"), data_dir,
                   ["experiment=cost_frontier", f"dataset.limit={N_CONVS}", "frontier.ks=[1,2,16]",
                    f"frontier.n_seeds={SEEDS}", f"frontier.n_boot={BOOT}", "aspects=[relevance,dialogue_overall]",
                    "report.out_dir=${paths.output_dir}/res"], False)
    return cfg, face.runner.run(cfg).experiment


@pytest.mark.slow
@pytest.mark.parametrize("aspect, level", [("relevance", "turn"), ("dialogue_overall", "dialogue")])
def test_a_k_subset_correlation_is_the_mean_over_its_subsets_of_the_hand_computed_ones(ran, data_dir, aspect, level):
    _, out = ran
    table = out.tables["frontier"].frame
    seen = table[(table["correlation"] == "measured") & (table["aspect"] == aspect)].set_index(
        ["level", "coefficient", "k"])
    first = json.loads((data_dir / released_scores_file(aspect)).read_text().splitlines()[0])
    ids = sorted(next(iter(first["turns"].values()))["particles"]["0"])  # the 16 instruction ids
    for coefficient in ("spearman", "pearson"):
        for k in (1, 2):
            hand = [_by_hand(data_dir, aspect, level, subset, coefficient)
                    for subset in random_instruction_subsets(ids, k, range(SEEDS))]
            item, system = np.array(hand).T
            row = seen.loc[(level, coefficient, k)]
            assert row["value"] == pytest.approx(item.mean(), abs=1e-9)
            assert row["sd_subsets"] == pytest.approx(item.std(ddof=1), abs=1e-9)
            assert row["n_subsets"] == SEEDS
            assert seen.loc[("system", coefficient, k), "value"] == pytest.approx(system.mean(), abs=1e-9)
        assert seen.loc[(level, coefficient, 16), "value"] == pytest.approx(
            _by_hand(data_dir, aspect, level, ids, coefficient)[0], abs=1e-9)


@pytest.mark.slow
def test_at_all_instructions_the_interval_is_face_metaevals(ran):
    from face.experiments.common import prepare
    from face.metaeval import meta_evaluate
    from face.methods import Inputs

    cfg, out = ran
    plan = prepare(cfg)
    _, convs = plan.load()
    released = plan.methods["face_released"].predict(
        Inputs(plan.dataset, convs, plan.aspects, Path(cfg.paths.data_dir), Path(cfg.paths.output_dir)))
    ref = meta_evaluate(released.predictions, convs, plan.aspects, ["all"], n_boot=BOOT, seed=0).set_index(
        ["level", "aspect", "coefficient"])
    table = out.tables["frontier"].frame
    top = table[(table["correlation"] == "measured") & (table["k"] == 16)]
    assert len(top) == 2 * 2 * 2  # 2 aspects × (own level, system) × 2 coefficients
    for r in top.itertuples():
        want = ref.loc[(r.level, r.aspect, r.coefficient)]
        assert (r.value, r.ci_low, r.ci_high) == pytest.approx((want["value"], want["ci_low"], want["ci_high"]),
                                                               abs=1e-9)
    # an interval at k < 16: one subset per resample in turn, around its mean over subsets
    low = table[(table["correlation"] == "measured") & (table["k"] == 1)]
    assert ((low["ci_low"] < low["value"]) & (low["value"] < low["ci_high"])).all()


@pytest.mark.slow
def test_the_cost_follows_the_prices_and_the_assumed_answer_sizes(ran):
    cfg, out = ran
    cost = out.tables["cost"].frame.set_index(["estimator", "k"])
    price_in, price_out = cfg.priced.llm.price_input_per_mtok, cfg.priced.llm.price_output_per_mtok
    assert np.allclose(cost["usd"], (cost["input_tokens"] * price_in + cost["output_tokens"] * price_out) / 1e6)
    # requests do not depend on the estimator; every instruction adds the same requests
    for k in (1, 2, 16):
        assert cost.xs(k, level="k")["requests"].nunique() == 1
    per = cost.loc[("sampling_n5_reasoning", 2), "requests"] - cost.loc[("sampling_n5_reasoning", 1), "requests"]
    assert cost.loc[("sampling_n5_reasoning", 16), "requests"] == pytest.approx(
        cost.loc[("sampling_n5_reasoning", 1), "requests"] + 15 * per)
    # scoring: 5 samples a request with sampling, 1 with logprobs; a reasoned sample ~300 output tokens, a bare one 8
    d = {e: cost.loc[(e, 16)] - cost.loc[(e, 1)] for e in cost.index.get_level_values(0).unique()}
    assert d["sampling_n5_reasoning"]["samples"] == pytest.approx(5 * d["logprobs_reasoning"]["samples"])
    assert d["sampling_n5_reasoning"]["samples"] == pytest.approx(5 * 15 * per)
    assert d["sampling_n5_reasoning"]["output_tokens"] == pytest.approx(300 * d["sampling_n5_reasoning"]["samples"])
    assert d["logprobs_no_reasoning"]["output_tokens"] == pytest.approx(8 * d["logprobs_no_reasoning"]["samples"])


@pytest.mark.slow
def test_only_the_released_setting_has_correlations_and_the_figure_shows_them(ran, data_dir):
    _, out = ran
    table = out.tables["frontier"].frame
    other = table[table["estimator"] != "sampling_n5_reasoning"]
    assert len(other) == 3 * 3 * 8 and other["value"].isna().all() and not other["pareto"].any()
    assert (other["correlation"] == "not measurable without a real judge").all()
    assert "not measurable without a real judge" in out.tables["frontier"].caption
    res = Path(out.out_dir)
    assert (res / "figures" / "cost_frontier_spearman.png").exists() and (res / "pareto.md").exists()


def test_the_pareto_set_is_the_points_above_every_cheaper_measured_one():
    cost = pd.DataFrame({"estimator": ["a"] * 4 + ["b"] * 4, "k": [1, 2, 4, 8] * 2,
                         "usd": [1.0, 2.0, 4.0, 8.0, 0.5, 1.0, 2.0, 4.0]})
    for c in ("requests", "samples", "http_requests", "input_tokens", "output_tokens"):
        cost[c] = 1.0
    corr = pd.DataFrame({"level": "turn", "aspect": "x", "coefficient": "spearman", "k": [1, 2, 4, 8],
                         "value": [0.5, 0.4, 0.6, 0.6], "ci_low": 0.0, "ci_high": 1.0, "sd_subsets": 0.0,
                         "n_subsets": 3, "n_items": 10})
    out = frontier(corr, cost, "a")
    a = out[out["estimator"] == "a"].set_index("k")
    # 0.4 at k=2 is below k=1's 0.5; 0.6 at k=8 only ties the cheaper k=4
    assert a["pareto"].tolist() == [True, False, True, False]
    b = out[out["estimator"] == "b"]
    assert b["value"].isna().all() and not b["pareto"].any() and (b["n_items"] == 10).all()
