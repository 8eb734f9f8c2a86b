"""Why predictions are rounded before correlating: float summation noise breaks ties in Spearman.

Compares, for every aspect and split, Spearman on predictions aggregated (a) by our aggregator
(rounded to 10 decimals, so equal means tie exactly) and (b) as a plain flat mean in file order
without rounding, against the published values.

    FACE_DATA_MIRROR=../shared/data .venv/bin/python scripts/check_tie_rounding.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from face.data import CRSARENA_EVAL, PUBLISHED_TABLE, ensure_data, released_scores_file  # noqa: E402
from face.datasets.crsarena import (  # noqa: E402
    ASPECTS,
    load_conversations,
    load_published_table,
)
from face.metaeval import items  # noqa: E402
from face.pipeline.aggregate import aggregate  # noqa: E402
from face.pipeline.released import load_scores  # noqa: E402


def main() -> None:
    d = Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))
    ensure_data(d, [CRSARENA_EVAL, PUBLISHED_TABLE, *[released_scores_file(a) for a in ASPECTS]],
                mirror=os.environ.get("FACE_DATA_MIRROR"))
    convs = load_conversations(d / CRSARENA_EVAL)
    pub = load_published_table(d / PUBLISHED_TABLE)
    pub = pub[(pub.method == "FACE") & (pub.coefficient == "spearman")].set_index(["aspect", "split"])["value"]
    scores = load_scores(d, list(ASPECTS))
    levels = {a.name: a.level for a in ASPECTS.values()}
    rounded = aggregate(scores, levels)
    flat = aggregate(scores, levels)  # same keys, then overwrite with unrounded flat means in file order
    t = (scores.groupby(["aspect", "conv_id", "turn_ind"], observed=True, sort=False)["score"]
         .agg(lambda s: sum(s) / len(s)))
    g = scores.groupby(["aspect", "conv_id"], observed=True, sort=False)["score"].agg(lambda s: sum(s) / len(s))
    flat.turn["pred"] = [t[(r.aspect, r.conv_id, r.turn_ind)] for r in flat.turn.itertuples()]
    flat.dialogue["pred"] = [g[(r.aspect, r.conv_id)] for r in flat.dialogue.itertuples()]
    print(f"{'aspect':18s} {'split':11s} {'rounded':>8s} {'flat':>8s} {'|diff|':>7s} {'published':>9s}")
    for aspect in ASPECTS:
        for split in ("redial", "opendialkg"):
            vals = []
            for preds in (rounded, flat):
                df = items(preds, convs, ASPECTS[aspect]).dropna(subset=["pred"])
                df = df[df.split == split]
                vals.append(stats.spearmanr(df.pred, df.human)[0])
            flag = "  <- third decimal differs" if round(vals[0], 3) != round(vals[1], 3) else ""
            print(f"{aspect:18s} {split:11s} {vals[0]:8.4f} {vals[1]:8.4f} {abs(vals[0] - vals[1]):7.4f} "
                  f"{pub[(aspect, split)]:9.3f}{flag}")


if __name__ == "__main__":
    main()
