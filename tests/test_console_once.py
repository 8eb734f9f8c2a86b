"""`face evaluate` says each thing once: the cost estimate (not again before the run, no dry-run banner), and
each identical warning (the missing bootstrap interval met for every aspect, split and level)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from helpers import evaluate

from face.data.schema import Conversation, Turn
from face.datasets.crsarena import ASPECTS
from face.metaeval import meta_evaluate, warn_once
from face.predictions import Predictions

THREE = [{"id": f"c{i}", "system": f"crs-{i}", "messages": [
    {"role": "user", "content": f"Any good film number {i}?"},
    {"role": "assistant", "content": "Try Heat (1995). Do you like older films?"},
    {"role": "user", "content": "Yes, thanks!"},
    {"role": "assistant", "content": "Then try Ronin (1998)."}]} for i in range(3)]


def _evaluate(tmp_path, *extra):
    return evaluate(tmp_path, THREE, *extra, aspects="relevance,dialogue_overall")


def test_evaluate_prints_the_estimate_once_without_a_dry_run_banner(evaluated_chat_logs_console):
    run, out, _ = evaluated_chat_logs_console  # `face evaluate` on two chat logs, two aspects, its output captured
    assert out.count("Cost estimate before sending anything") == 1, out
    assert "DRY RUN" not in out and "Dry run" not in out
    assert (run / "run_file.json").exists()  # the run happened


def test_evaluate_dry_run_prints_the_estimate_once_and_says_where_it_is(tmp_path, capsys):
    assert _evaluate(tmp_path, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("Cost estimate before sending anything") == 1 and "DRY RUN" not in out
    assert f"nothing was sent; the estimate is in {tmp_path / 'out' / 'cost_estimate.csv'}" in out
    assert not (tmp_path / "out" / "run_file.json").exists()


def test_a_missing_interval_met_for_every_aspect_split_and_level_is_warned_once(caplog):
    """Three conversations of three systems (ReDial 1, OpenDialKG 2): the ReDial split has no turn-level interval
    for either turn aspect and no system has two conversations -- met again in a second meta-evaluation."""
    warn_once.cache_clear()
    convs, rows = [], []
    for i, split in enumerate(["redial", "opendialkg", "opendialkg"]):
        turns = []
        for t in range(3):
            turns += [Turn(2 * t, "USER", "u"), Turn(2 * t + 1, "ASST", "a", {"relevance": t % 3, "efficiency": t})]
            rows += [("relevance", f"c{i}", 2 * t + 1, float(t + i)), ("efficiency", f"c{i}", 2 * t + 1, float(t))]
        convs.append(Conversation(f"c{i}", tuple(turns), {}, system=f"s{i}", split=split))
    preds = Predictions(pd.DataFrame(rows, columns=["aspect", "conv_id", "turn_ind", "pred"]),
                        pd.DataFrame(columns=["aspect", "conv_id", "pred"]))
    with caplog.at_level("WARNING", logger="face.metaeval"):
        for _ in range(2):
            meta_evaluate(preds, convs, [ASPECTS["relevance"], ASPECTS["efficiency"]], ["redial", "opendialkg", "all"],
                          n_boot=20)
    said = Counter(r.getMessage() for r in caplog.records)
    assert said == {"no bootstrap interval: the items come from 1 conversation(s), need >= 2": 1,
                    "no system-level interval: a system has 1 conversation(s), need >= 2 per system": 1}, said
