"""Reliability (issue 21): a budget that cannot be a budget -- a negative, infinite or NaN cap or price -- an
unknown ``method.scoring.logprobs_missing`` policy, and (issue 41) requests of more samples than the requests in flight
could hold in memory are refused by both entry points: one ``error:`` line naming the setting, exit 2, nothing sent and
nothing written outside the case's temp dir."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers import write_logs
from reliability import entry_argv, refused, run

# the reliability suite (issue 21): in-process, but ~150 cases; run with the slow tests, one at a time, so that
# no other test writes into the project tree while a case checks that nothing outside its temp dir changed
pytestmark = pytest.mark.slow

CONV = {"id": "c1", "system": "crs-a", "messages": [
    {"role": "user", "content": "Any thriller for tonight?"},
    {"role": "assistant", "content": "How about Heat (1995)?"},
    {"role": "user", "content": "Yes, thanks!"}]}

# (setting=value, words the one error line must contain)
CASES = {
    "max_cost_negative": ("llm.max_cost_usd=-1", ["llm.max_cost_usd", ">= 0"]),
    "max_cost_inf": ("llm.max_cost_usd=inf", ["llm.max_cost_usd", "finite", "null means no cap"]),
    "max_cost_nan": ("llm.max_cost_usd=nan", ["llm.max_cost_usd"]),
    "max_calls_negative": ("llm.max_calls=-1", ["llm.max_calls", ">= 0"]),
    "price_in_negative": ("llm.price_input_per_mtok=-0.5", ["llm.price_input_per_mtok", ">= 0"]),
    "price_out_inf": ("llm.price_output_per_mtok=inf", ["llm.price_output_per_mtok", "finite"]),
    "price_in_inf": ("llm.price_input_per_mtok=-inf", ["llm.price_input_per_mtok"]),
    "logprobs_missing_bad": ("method.scoring.logprobs_missing=guess",
                             ["method.scoring.logprobs_missing", "parsed", "redraw", "min"]),
    "samples_beyond_memory": ("method.scoring.n=100000000",
                              ["method.scoring.n must fit in memory", "100,000,000 samples would hold", "GB"]),
}


def _argv(entry: str, setting: str, tmp: Path) -> list[str]:
    if entry == "face":
        return entry_argv(entry, tmp, f"paths.cache_dir={tmp / 'cache'}", "run_size=tiny", setting,
                          logs=write_logs(tmp / "logs.jsonl", [CONV]))
    return entry_argv(entry, tmp, "run_size=tiny", "dataset.limit=1", "tracking=none",
                      f"paths.results_dir={tmp / 'results'}", f"paths.cache_dir={tmp / 'cache'}",
                      f"hydra.run.dir={tmp / 'run'}", setting)


@pytest.mark.parametrize("entry", ["face", "run.py"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_budget_that_cannot_hold_is_refused(entry, case, tmp_path, monkeypatch):
    setting, words = CASES[case]
    o = run(entry, _argv(entry, setting, tmp_path), tmp_path, monkeypatch)
    assert refused(o, *words) == []
    written = [f for d in ("out", "cache", "results") for f in (tmp_path / d).rglob("*") if f.is_file()]
    assert written == []  # no estimate, no cache, no run file (Hydra's own run dir aside)
