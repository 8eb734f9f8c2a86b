"""The LLM baselines and the transfer method as methods, and their experiments, on the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from face.baselines.llm import GEval, LLMCoTICL, LLMDirect, training_conversations, units_of
from face.baselines.transfer import FaceTransfer
from face.runfile import read_run_file

ROOT = Path(__file__).resolve().parents[1]
FAST = ("llm=fake", "run_size=tiny", "metaeval.n_boot=50")



@pytest.mark.slow
def test_crsarena_baselines_on_two_conversations(run_experiment, plotted):
    ran = run_experiment("experiment=crsarena_baselines", "dataset.limit=2", "aspects=[relevance,dialogue_overall]",
                         *FAST, tracking=False)
    cfg, out = ran.cfg, ran.experiment
    run_dir = Path(cfg.paths.output_dir)
    for name in ("llm_direct", "llm_cot_icl", "g_eval", "face"):
        raw = json.loads((run_dir / f"run_file_{name}.json").read_text())
        assert len(raw) == 2  # the authors' run-file format: one record per conversation
        preds = read_run_file(run_dir / f"run_file_{name}.json")
        # 1 turn-level aspect × 11 assistant turns, 1 dialogue-level aspect × 2 conversations
        if name != "face":
            assert len(preds.turn) == 11 and len(preds.dialogue) == 2
    scores = pd.read_csv(run_dir / "scores_llm_direct.csv")
    assert scores["score"].between(0, 4).all()
    long = out.tables["table_long"].frame
    ours = long[long["source"].str.startswith("ours")]
    assert set(ours["method"]) == {"LLM-Direct", "LLM-CoT+ICL", "G-Eval", "FACE"}
    assert ours["source"].str.contains("scripted-model").all()  # every cell says what produced it
    pub = long[long["source"].str.startswith("published")]
    assert {"UniEval", "FACE w/o train", "LLM-Direct", "G-Eval"} <= set(pub["method"])
    assert len(pub[(pub["method"] == "UniEval") & (pub["aspect"] == "relevance")]) == 4  # 2 splits × 2 coefficients
    assert pub[pub["method"] == "UniEval"]["source"].str.contains("not recomputed").all()
    res_dir = Path(out.out_dir)
    sig = pd.read_csv(res_dir / "significance.csv")
    assert set(sig["method_b"]) == {"llm_direct", "llm_cot_icl", "g_eval"} and set(sig["method_a"]) == {"face"}
    assert "| LLM-CoT+ICL |" in (res_dir / "table_spearman.md").read_text()
    shown = plotted["bars_redial_spearman.png"]  # per method: our bars (and the published ones beside them)
    aspects = [t.replace("\n", "_") for t in shown["xticks"]]
    def redial(source, method):
        return source[(source["method"] == method) & (source["split"] == "redial")
                      & (source["coefficient"] == "spearman")].set_index("aspect")["value"]

    for method in ("LLM-Direct", "G-Eval"):
        # a value the method does not have (a constant prediction on two conversations) is drawn as an empty bar
        drawn = np.nan_to_num([redial(ours, method).get(a, np.nan) for a in aspects])
        assert shown["bars"][method] == pytest.approx(drawn)
    # the published values of our methods: one marker each, on the method's own bar
    published = [v for m in sorted(set(ours["method"])) for a, v in redial(pub, m).items() if a in aspects]
    assert sorted(shown["points"][:, 1]) == pytest.approx(sorted(published))
    steps = json.loads((run_dir / "g_eval_steps.json").read_text())
    assert set(steps) == {"relevance", "dialogue_overall"} and all(steps.values())  # one set per aspect


# conf/method/face_transfer.yaml's mapping: target quality -> CRSArena-Eval aspect
MAPPING = {"maintains_context": "relevance", "engaging": "interestingness", "understandable": "understanding",
           "overall": "dialogue_overall"}


@pytest.mark.slow  # a whole transfer experiment per corpus: 3-5 s each
@pytest.mark.parametrize("corpus", ["topical_chat", "persona_chat"])
def test_transfer_on_three_items(run_experiment, plotted, corpus):
    ran = run_experiment(f"experiment=transfer_{corpus}", "dataset.limit=3", *FAST, tracking=False)
    out = ran.experiment
    res = out.results
    assert set(res["method"]) == {"face_transfer", "llm_direct", "llm_cot_icl", "g_eval"}
    assert set(res["aspect"]) == set(MAPPING)
    assert set(res["level"]) == {"turn", "system"}
    assert "TRANSFER: CRSArena instructions" in out.outputs["face_transfer"].label
    assert (res[res["level"] == "turn"]["n"] + res[res["level"] == "turn"]["n_missing"] == 3).all()
    mine = res[(res["method"] == "face_transfer") & (res["level"] == "turn") & (res["coefficient"] == "spearman")
               & (res["split"] == "all")].set_index("aspect")["value"]
    lines = plotted["transfer_spearman.png"]["lines"]  # per aspect: CRSArena ReDial, OpenDialKG (published) → ours
    assert len(lines) == len(MAPPING)
    for target, src in MAPPING.items():
        [(x, y)] = [xy for name, xy in lines.items() if name.endswith(f"/{src} → {target}")]
        assert x == [0, 1, 2] and y[2] == pytest.approx(mine[target], nan_ok=True)
    long = out.tables["table_long"].frame
    assert (long["source"].str.contains("Mehri & Eskenazi")).any()


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_every_baseline_prompt_is_a_version_in_the_mlflow_prompt_registry(run_experiment):
    import mlflow
    from mlflow import genai

    ran = run_experiment("experiment=crsarena_baselines", "dataset.limit=1", "aspects=[efficiency]", *FAST)
    cfg = ran.cfg
    mlflow.set_tracking_uri(cfg.tracking.tracking_uri)
    for name in ("llm-direct", "llm-cot-icl", "g-eval", "g-eval-steps"):
        prompt = genai.load_prompt(f"prompts:/face-efficiency-{name}@latest", allow_missing=True)
        assert prompt is not None and prompt.template.strip(), name
    direct = genai.load_prompt("prompts:/face-efficiency-llm-direct@latest").template
    assert (ROOT / "face" / "prompts" / "baselines" / "direct.txt").read_text().strip() in direct


def test_transfer_uses_the_mapped_released_instructions(data_dir):
    from face.datasets.usr import USR

    m = FaceTransfer()
    ds = USR("usr_topical_chat", "topical_chat")
    assert m.required_files(ds, [ds.aspects["engaging"]]) == ["face_released/top16_instructions/interestingness.json"]
    ins = m.instruction_set(data_dir, ds.aspects["maintains_context"])
    assert len(ins) == 16
    with pytest.raises(ValueError, match="no CRSArena aspect"):
        m.required_files(ds, [ds.aspects["natural"]])
    with pytest.raises(ValueError, match="mapping"):
        FaceTransfer(mapping={"overall": "not_an_aspect"})


def test_dry_run_prints_costs_and_sends_nothing(run_experiment, capsys):
    ran = run_experiment("experiment=transfer_persona_chat", "llm=fake", "llm.dry_run=true", "dataset.limit=4",
                         "run_size=tiny", tracking=False)
    cfg, out = ran.cfg, ran.experiment
    assert out.dry_run
    printed = capsys.readouterr().out
    for name in ("LLM-Direct", "LLM-CoT+ICL", "G-Eval", "FACE live"):
        assert name in printed
    est = pd.read_csv(Path(cfg.paths.output_dir) / "cost_estimate_llm_direct.csv")
    assert est["samples"].iloc[0] == 4 * 4  # 4 items × 4 mapped qualities, n = 1


def test_cot_examples_come_from_the_training_fold_only(cfg_factory, data_dir):
    from face.datasets.crsarena import CRSArenaEval

    ds = CRSArenaEval()
    convs = ds.load_all(data_dir)[:40]
    train = {c.conv_id for c in training_conversations(convs, 2, 0)}
    assert 0 < len(train) < len(convs)
    m = LLMCoTICL(k_examples=3)
    a = ds.aspects["relevance"]
    pool = units_of([a], [c for c in convs if c.conv_id in train])
    text = m.examples(a, pool, units_of([a], convs[:1])[0], np.random.default_rng(0))
    assert text.count("Human score:") == 3
    assert all(u.conv.conv_id in train for u in pool)


@pytest.mark.parametrize("cls", [LLMDirect, LLMCoTICL, GEval])
def test_bad_parameters_fail_when_built(cls):
    with pytest.raises(ValueError, match="method.n"):
        cls(n=0)
