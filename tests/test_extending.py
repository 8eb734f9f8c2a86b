"""Extension points: a dataset and a method defined outside the package, registered by a test-local config
directory (hydra.searchpath), run through an unchanged experiment, give the correlations scipy gives."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from scipy import stats
from toy_extension import toy_conversations

TOY_CONF = Path(__file__).parent / "toy_conf"


def test_toy_dataset_and_method_run_through_an_experiment(cfg_factory):
    cfg = cfg_factory(f"hydra.searchpath=[file://{TOY_CONF}]", "experiment=toy_eval", "metaeval.n_boot=0",
                      tracking=False)
    out = importlib.import_module(cfg.runner).run(cfg)
    res = out["results"].set_index(["level", "aspect", "split", "coefficient"])["value"]
    convs = toy_conversations()
    turns = [(-len(t.utterance.split()), t.labels["brevity"]) for c in convs for t in c.assistant_turns()]
    assert res["turn", "brevity", "all", "spearman"] == pytest.approx(stats.spearmanr(*zip(*turns))[0])
    dial_a = [(sum(-len(t.utterance.split()) for t in c.assistant_turns()) / 2, c.labels["overall"])
              for c in convs if c.split == "a"]
    assert res["dialogue", "overall", "a", "pearson"] == pytest.approx(stats.pearsonr(*zip(*dial_a))[0])
    assert set(out["results"]["split"]) == {"a", "b", "all"}  # the dataset's own splits, then pooled
    assert (Path(cfg.paths.output_dir) / "run_file.json").exists()


def test_unknown_aspect_of_a_dataset_is_rejected_before_anything_runs(cfg_factory):
    cfg = cfg_factory(f"hydra.searchpath=[file://{TOY_CONF}]", "experiment=toy_eval", "aspects=[relevance]",
                      tracking=False)
    with pytest.raises(ValueError, match="has no aspect 'relevance'; its aspects: brevity, overall"):
        importlib.import_module(cfg.runner).run(cfg)
    assert not Path(cfg.paths.output_dir).exists()


@pytest.mark.parametrize("override,message", [
    ("method.estimator=mode", "unknown estimator 'mode'"),
    ("method.unit=sentence", "unknown unit 'sentence'"),
    ("method.order=random", "unknown order 'random'"),
    ("method.particle_agg=mode", "method.particle_agg must be one of"),
    ("method.particles.source=gold", "unknown particle source 'gold'"),
    ("method.instructions.source=file", "needs method.instructions.file"),
    ("dataset.limit=0", "dataset.limit must be a positive integer"),
    ("dataset.splits=[test]", "unknown split"),
    ("metaeval.splits=[test]", "not splits of CRSArena-Eval"),
])
def test_bad_choices_fail_before_anything_is_fetched_written_or_sent(cfg_factory, override, message):
    cfg = cfg_factory("experiment=crsarena_main", "llm=scripted", override)
    with pytest.raises(ValueError, match=message):
        importlib.import_module(cfg.runner).run(cfg)
    assert not Path(cfg.paths.output_dir).exists()
    assert not Path(cfg.tracking.tracking_uri.removeprefix("sqlite:///")).exists()  # no MLflow run either


def test_method_released_refuses_a_dataset_it_has_no_scores_for(cfg_factory):
    cfg = cfg_factory("experiment=reproduce_table2", "dataset=usr_topical_chat", tracking=False)
    with pytest.raises(ValueError, match="released scores, which exist only for CRSArena-Eval"):
        importlib.import_module(cfg.runner).run(cfg)
