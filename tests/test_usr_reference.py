"""USR data (loader counts, label aggregation, the reference) and the reference-based metrics: BLEU, ROUGE-L
and METEOR pinned on hand-checked examples, and the published USR values reproduced from the full data."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from face.baselines import reference
from face.datasets import usr

FILES = {"topical_chat": "tc_usr_data.json", "persona_chat": "pc_usr_data.json"}
needs_java = pytest.mark.skipif(not reference.java_available(), reason="METEOR 1.5 needs a Java runtime")


@pytest.mark.parametrize("corpus,per_context", [("topical_chat", 6), ("persona_chat", 5)])
def test_usr_loader_counts_and_labels(mirror, corpus, per_context):
    path = mirror / "usr" / FILES[corpus]
    every = usr.load_usr(path, exclude_ground_truth=False)
    scored = usr.load_usr(path)
    assert len(every) == 60 * per_context  # 360 / 300 annotated responses
    assert len(scored) == 60 * (per_context - 1)  # the original ground truth is the reference, not an item
    assert {c.conv_id.split(":")[0] for c in scored} == {str(i) for i in range(60)}
    raw = json.loads(path.read_text())
    for conv in scored[:25]:
        ctx_i = int(conv.conv_id.split(":")[0])
        r = next(r for r in raw[ctx_i]["responses"] if r["model"] == conv.system)
        labels = conv.turns[-1].labels
        assert len(r["Overall"]) == 3  # three annotators
        assert labels["overall"] == pytest.approx(np.mean(r["Overall"]))
        assert labels["maintains_context"] == pytest.approx(np.mean(r["Maintains Context"]))
        gt = next(x for x in raw[ctx_i]["responses"] if x["model"] == usr.GROUND_TRUTH)
        assert conv.meta["reference"] == gt["response"].strip()
        assert conv.turns[-1].utterance == r["response"].strip() and conv.turns[-1].role == "ASST"


def test_bleu_rouge_by_hand():
    hyp, ref = "the cat sat on the mat", "the cat is on the mat"
    s = reference.score_all([hyp, ref], [ref, ref], ["bleu1", "bleu2", "bleu3", "bleu4", "rouge_l"])
    # unigrams: 5 of 6 match (the ×2, cat, on, mat), equal lengths (no brevity penalty)
    assert s["bleu1"][0] == pytest.approx(5 / 6, abs=1e-8)
    # bigrams: 3 of 5 (the cat, on the, the mat): geometric mean of 5/6 and 3/5
    assert s["bleu2"][0] == pytest.approx(math.sqrt(5 / 6 * 3 / 5), abs=1e-8)
    # trigrams: 1 of 4 (on the mat)
    assert s["bleu3"][0] == pytest.approx((5 / 6 * 3 / 5 * 1 / 4) ** (1 / 3), abs=1e-8)
    # no 4-gram matches: the coco code's tiny additive smoothing keeps it just above 0
    assert 0 < s["bleu4"][0] < 1e-3
    # ROUGE-L: LCS "the cat on the mat" = 5 → P = R = 5/6, F_beta = 5/6 for any beta
    assert s["rouge_l"][0] == pytest.approx(5 / 6)
    assert [s[m][1] for m in ("bleu1", "bleu4", "rouge_l")] == pytest.approx([1, 1, 1], abs=1e-8)
    # a brevity penalty: a 3-word hypothesis of a 6-word reference, all unigrams matching
    short = reference.score_all(["the cat is"], [ref], ["bleu1"])["bleu1"][0]
    assert short == pytest.approx(math.exp(1 - 6 / 3), abs=1e-8)


@pytest.mark.slow
@needs_java
def test_meteor_known_values():
    ref = "the cat is on the mat"
    s = reference.score_all(["the cat sat on the mat", ref, "completely different words here"], [ref] * 3, ["meteor"])
    assert s["meteor"][1] == pytest.approx(1.0)
    assert s["meteor"][2] == 0.0
    assert s["meteor"][0] == pytest.approx(0.4373022019, abs=1e-8)  # METEOR 1.5, -l en -norm (pinned)


@pytest.mark.parametrize("corpus,metric,published_spearman", [
    # USR Tables 5/6 (Overall): the transcription's "pearson" values equal our Spearman (labels swapped there)
    ("topical_chat", "bleu4", 0.2956), ("persona_chat", "bleu2", 0.0943), ("topical_chat", "rouge_l", 0.2870)])
def test_published_usr_values_reproduced(mirror, corpus, metric, published_spearman):
    convs = usr.load_usr(mirror / "usr" / FILES[corpus])
    hyps = [c.turns[-1].utterance for c in convs]
    refs = [c.meta["reference"] for c in convs]
    y = [c.turns[-1].labels["overall"] for c in convs]
    scores = reference.score_all(hyps, refs, [metric])[metric]
    assert stats.spearmanr(scores, y)[0] == pytest.approx(published_spearman, abs=1e-4)


def test_usr_published_table_and_dataset(tmp_path):
    from face.datasets.usr import USR

    pub = USR("usr_topical_chat", "topical_chat").published(tmp_path)
    assert set(pub.columns) >= {"method", "split", "aspect", "coefficient", "value", "source"}
    row = pub[(pub["method"] == "METEOR") & (pub["aspect"] == "maintains_context") & (pub["coefficient"] == "spearman")]
    assert row["value"].tolist() == [0.3018]
    assert pub[pub["method"] == "FACE (FACE paper)"]["value"].tolist() == [0.456]


def test_reference_metric_config_checks():
    with pytest.raises(ValueError, match="method.metric"):
        reference.ReferenceMetric(metric="bleu5")
