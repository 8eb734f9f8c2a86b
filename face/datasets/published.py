"""Published numbers this project compares with but cannot recompute, each with its citation.

USR (Mehri & Eskenazi, "USR: An Unsupervised and Reference Free Evaluation Metric for Dialog Generation",
ACL 2020, pp. 681-707, doi:10.18653/v1/2020.acl-main.64): turn-level correlations with the mean human
rating, original ground-truth responses excluded (300 Topical-Chat, 240 PersonaChat items). Values as in the
hand transcription kept beside the data (``published/usr_paper_tables.json`` of the data mirror; one
secondary transcription of the ACL Anthology PDF, the USR rows corroborated by two other sites): Tables 5/6
(every metric vs Overall Quality), Tables 3/4 (per quality: the best non-USR metric only).

Finding of ``experiment=usr_reference_metrics``: in Tables 5/6 (Overall), for BLEU-1..4, METEOR and ROUGE-L,
our Spearman equals the transcription's "pearson" value and our Pearson its "spearman" value, to four
decimals, on both data sets: the two coefficient labels of those tables are swapped in the transcription
(or in the paper). The per-quality METEOR cells of Tables 3/4 match under their own labels. We keep the
labels as transcribed (``coefficient``); the comparison table says under which label each cell matches.

FACE (Joko & Hasibi, arXiv:2506.00314): the transfer headline (Spearman, Overall, turn level) — FACE 0.456
(Topical-Chat) and 0.510 (PersonaChat) against 0.360 and 0.407 for the best baseline — is known only from
third-party summaries (flagged unverified in the data mirror's README); the baseline is not named there.
"""

from __future__ import annotations

import pandas as pd

USR_CITATION = "Mehri & Eskenazi, USR, ACL 2020 (Tables 3-6, via a hand transcription)"
FACE_CITATION = "Joko & Hasibi, FACE, arXiv:2506.00314 (transfer headline, third-party summaries, unverified)"

# our quality names; the transcription's "interesting" is USR's Engaging, "overall_quality" its Overall
_OVERALL = {  # corpus -> metric -> (spearman, pearson) as transcribed
    "topical_chat": {
        "F-1": (0.1645, 0.1690), "BLEU-1": (0.2728, 0.2876), "BLEU-2": (0.2862, 0.3012),
        "BLEU-3": (0.2569, 0.3006), "BLEU-4": (0.2160, 0.2956), "METEOR": (0.3365, 0.3908),
        "ROUGE-L": (0.2745, 0.2870), "Greedy Matching": (0.1712, 0.1943), "Embedding Average": (0.1803, 0.2038),
        "Vector Extrema": (0.2032, 0.2091), "Skip-Thought": (0.1040, 0.1181), "BERTScore (base)": (0.3229, 0.3540),
        "BERTScore (large)": (0.2982, 0.3252), "USR - MLM": (0.3086, 0.3345), "USR - DR (x = c)": (0.3245, 0.4068),
        "USR - DR (x = f)": (0.1419, 0.3221), "USR": (0.4192, 0.4220)},
    "persona_chat": {
        "F-1": (0.1422, 0.1241), "BLEU-1": (0.0434, 0.0469), "BLEU-2": (0.1122, 0.0943),
        "BLEU-3": (0.1202, 0.0924), "BLEU-4": (0.1353, 0.0899), "METEOR": (0.2527, 0.2713),
        "ROUGE-L": (0.0659, 0.0385), "Greedy Matching": (0.0916, 0.0625), "Embedding Average": (0.1182, 0.1428),
        "Vector Extrema": (0.1570, 0.1410), "Skip-Thought": (-0.0393, -0.0452), "BERTScore (base)": (0.1690, 0.1526),
        "BERTScore (large)": (0.1518, 0.1211), "USR - MLM": (0.0795, 0.0788), "USR - DR (x = c)": (0.4814, 0.6087),
        "USR - DR (x = f)": (-0.0495, -0.0454), "USR": (0.4693, 0.4115)},
}
_PER_QUALITY = {  # corpus -> metric -> quality -> (spearman, pearson); Tables 3 (TC) and 4 (PC)
    "topical_chat": {
        "BERTScore (base)": {"understandable": (0.2502, 0.2611), "natural": (0.2094, 0.2260),
                             "engaging": (0.4121, 0.3901)},
        "METEOR": {"maintains_context": (0.3018, 0.2495), "uses_knowledge": (0.3909, 0.3328)},
        "USR": {"understandable": (0.3152, 0.2932), "natural": (0.3037, 0.2763), "maintains_context": (0.3769, 0.4160),
                "engaging": (0.4645, 0.4555), "uses_knowledge": (0.3353, 0.3175)},
    },
    "persona_chat": {
        "BERTScore (base)": {"understandable": (0.0685, 0.0672), "engaging": (0.0491, 0.0325)},
        "Vector Extrema": {"natural": (0.1375, 0.1458)},
        "METEOR": {"maintains_context": (0.2564, 0.2500), "uses_knowledge": (0.1719, 0.1678)},
        "USR": {"understandable": (0.1324, 0.1241), "natural": (0.2430, 0.1862), "maintains_context": (0.5280, 0.6065),
                "engaging": (0.0171, 0.0315), "uses_knowledge": (0.3177, 0.4027)},
    },
}
# FACE transfer headline: corpus -> method -> Spearman of Overall (turn level)
_FACE_TRANSFER = {"topical_chat": {"FACE": 0.456, "best baseline (unnamed)": 0.360},
                  "persona_chat": {"FACE": 0.510, "best baseline (unnamed)": 0.407}}


def usr_published(corpus: str) -> pd.DataFrame:
    """USR's published turn-level correlations for one corpus: method, split, aspect, coefficient, value,
    source (``PUBLISHED_COLUMNS`` + the citation)."""
    cells = [(metric, "overall", sp) for metric, sp in _OVERALL[corpus].items()]
    cells += [(metric, q, sp) for metric, qualities in _PER_QUALITY[corpus].items() for q, sp in qualities.items()]
    rows = [(metric, "all", q, coef, v, USR_CITATION) for metric, q, sp in cells
            for coef, v in zip(("spearman", "pearson"), sp, strict=True)]
    for method, v in _FACE_TRANSFER[corpus].items():
        rows.append((f"{method} (FACE paper)", "all", "overall", "spearman", v, FACE_CITATION))
    return pd.DataFrame(rows, columns=["method", "split", "aspect", "coefficient", "value", "source"])
