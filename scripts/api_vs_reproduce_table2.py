"""``face.evaluate`` on CRSArena-Eval against ``experiment=reproduce_table2`` (the authors' released judgements
aggregated directly), every turn and dialogue score: through the replay judge (the live method, the judgements served
over HTTP) and with the released scores (``method="face_released"``, no LLM).

    python scripts/api_vs_reproduce_table2.py [--limit N]

The Python API runs the live method on the dataset by name (``face.evaluate("crsarena_eval", llm="replay")``), with
the paper's run size: 20 decomposition samples, 16 released instructions × 5 samples, reasoning prompts. A score
may differ from reproduce_table2's only in a turn or conversation with an identical-prompt group (several released
particles that read the same in a prompt: the replay judge answers them once, with the first one's judgement; see
``experiment=replay_table2``); with the released scores every score must be equal. Prints the counts; exit 1 if
any other difference is found. On the full data, ``face.meta_evaluate`` of the released result must also give
every committed correlation of ``results/reproduce_table2`` (values and 95% CIs). Cold ≈ 11 min (every
prompt sent to the judge), warm (cache of a previous run or of ``make results``) ≈ 1-2 min.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    args = p.parse_args(argv)
    os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
    import face
    from face.data import ensure_data
    from face.datasets.crsarena import ASPECTS, CRSArenaEval, load_conversations
    from face.experiments.replay_table2 import compare_runs, identical_groups
    from face.methods import Inputs
    from face.pipeline.released import FaceReleased

    data_dir = Path(os.environ.get("FACE_DATA_DIR", ROOT / "data" / "raw"))
    ensure_data(data_dir, mirror=os.environ.get("FACE_DATA_MIRROR"))
    result = face.evaluate("crsarena_eval", llm="replay", limit=args.limit, **{"metaeval.n_boot": 0})
    convs = load_conversations(data_dir / "crsarena_eval" / "crs_arena_eval.json")[: args.limit or None]
    with tempfile.TemporaryDirectory() as tmp:  # reproduce_table2's predictions: the released scores aggregated
        direct = FaceReleased().predict(Inputs(CRSArenaEval(), convs, list(ASPECTS.values()), data_dir,
                                               Path(tmp))).predictions
    explained = {k for conv_id, turn_ind, _ in identical_groups(data_dir) for a in ASPECTS
                 for k in ((a, conv_id, turn_ind), (a, conv_id))}
    released = face.evaluate("crsarena_eval", method="face_released", limit=args.limit, quiet=True,
                             **{"metaeval.n_boot": 0})
    bad = False
    for what, res, allowed in (("llm=replay", result, explained), ('method="face_released"', released, set())):
        diff = compare_runs(res.predictions, direct, allowed)
        print(f"\nface.evaluate(\"crsarena_eval\", {what}) vs reproduce_table2 on {len(convs)} conversations "
              f"({res.label}):")
        for level, live, ref in (("turn", res.predictions.turn, direct.turn),
                                 ("dialogue", res.predictions.dialogue, direct.dialogue)):
            d = diff[diff["level"] == level]
            worst = f"; max |delta| {d['delta'].abs().max():.4f}" if len(d) else ""
            print(f"  {level} level: {len(live)} face.evaluate / {len(ref)} reproduce_table2 scores; "
                  f"{len(ref) - len(d)} equal to 1e-10; {len(d)} differ, {int((d['reason'] != 'UNEXPLAINED').sum())} "
                  f"of them in a turn or conversation with an identical-prompt group{worst}; "
                  f"{int((d['reason'] == 'UNEXPLAINED').sum())} unexplained")
        bad |= bool((diff["reason"] == "UNEXPLAINED").any())
    if args.limit is None:  # the committed correlations of reproduce_table2, recomputed by face.meta_evaluate
        import pandas as pd

        committed = pd.read_csv(ROOT / "results" / "reproduce_table2" / "correlations.csv")
        ours = face.meta_evaluate(released, n_boot=1000, seed=0)
        key = ["level", "aspect", "split", "coefficient"]
        m = committed.merge(ours, on=key, suffixes=("_committed", "_api"))
        same = int(((m["value_committed"] - m["value_api"]).abs() < 5e-7).sum())
        ci = int((((m["ci_low_committed"] - m["ci_low_api"]).abs() < 5e-7)
                  & ((m["ci_high_committed"] - m["ci_high_api"]).abs() < 5e-7)).sum())
        print(f"\nface.meta_evaluate(released result) vs results/reproduce_table2/correlations.csv: {same}/"
              f"{len(committed)} values and {ci}/{len(committed)} CIs equal (to the file's 6 decimals)")
        bad |= same != len(committed) or ci != len(committed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
