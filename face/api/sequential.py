"""``face.compare_sequential`` and ``face compare A B --sequential``: score two sets of logged conversations with FACE
only until every requested aspect is decided.

The conversations of both sides are put in one seeded random order (paired: the same order of the shared ids; else
one order per side) and scored in steps of ``batch`` conversations per side, both sides each step. A step is a
``face evaluate`` run (``face.api.evaluation``: the same checks, runner and LLM cache) of each side's conversations
scored so far into ``OUT/<name>``: what earlier steps scored is answered by the cache, so only the new conversations
are sent, and a stopped or killed run, started again with the same command, goes through the same steps and sends
only what it had not scored. After each step ``face.sequential.SequentialComparison`` (anytime-valid confidence
sequences, each aspect at α / K) is updated with the new conversations' scores (a conversation's score per aspect:
its dialogue score, or the mean of its turns' scores). The run stops when every aspect is decided, or when the
conversations, ``max_conversations`` or the cost cap run out (``llm.max_cost_usd``: the whole comparison's; each
step's run is capped at what is left of it, so a step may stop inside its batch: the comparison is then made over
the steps completed, each side's directory evaluated again at that step's conversations from the cache, and what the
broken step scored stays cached for the rerun). ``OUT/comparison`` then holds a normal ``face compare`` report of
the scored conversations, the sequence's bounds per step (``sequential_steps``), the decisions with, for an
undecided aspect, an estimate of the conversations it would need (``sequential``), what was saved
(``sequential_saved``) and one figure per aspect (``figures/sequential_<aspect>.png``).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from face.api.evaluate import evaluation
from face.api.inputs import source_of
from face.api.overrides import conversations
from face.comparison.engine import compare
from face.comparison.runs import from_dir
from face.datasets.crsarena import ASPECTS, write_conversations
from face.errors import ConfigError, require_writable_dir
from face.files import Location, claimed
from face.llm import BudgetExceeded
from face.report.tables import to_markdown, write_table
from face.sequential import METHODS, SequentialComparison, conversations_needed

log = logging.getLogger(__name__)

COUNTS = ("http_requests", "input_tokens", "output_tokens", "cost_usd")  # sent (a cache hit is not)


@dataclass
class SequentialResult:
    """``comparison``: the ``face compare`` of the scored conversations; ``steps``: per step × aspect the
    conversations scored and the sequence's bounds and decision; ``decisions``: the last step's; ``saved``: scored
    vs available; ``stop``: why the scoring stopped; ``out``: where everything is."""

    comparison: Any
    steps: pd.DataFrame
    decisions: pd.DataFrame
    saved: pd.DataFrame
    stop: str
    out: Path
    available: int = 0  # conversations per side in the files (the smaller side's)

    def summary(self) -> str:
        lines = [self.comparison.summary(), "", f"Sequential: stopped because {self.stop}.",
                 to_markdown(self.decisions), "", "What was scored vs available:", to_markdown(self.saved)]
        undecided = self.decisions[self.decisions["decision"] == "undecided"]
        if len(undecided):
            lines += ["", "Undecided: what more would probably take (an estimate: the interval's centre kept, its "
                      "width shrinking like √(log n / n)):"]
            lines += [f"  {r.aspect}: {_needs_line(r, self.available)}" for r in undecided.itertuples()]
        return "\n".join(lines)


def _needs_line(r: Any, available: int) -> str:
    """What an undecided aspect would probably need (a row of the decisions), in words."""
    n = min(r.n_baseline, r.n_candidate)
    where = f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}] after {n} per side"
    if math.isinf(r.needed_per_side):
        return f"{where}: centred on 0, no width decides it (without a target difference); not reachable"
    if r.needed_per_side > available:
        return (f"{where}: ≈ {r.needed_per_side:.0f} conversations per side, not reachable with the {available} "
                "available")
    return (f"{where}: ≈ {r.needed_per_side:.0f} conversations per side, {2 * (r.needed_per_side - n):.0f} more in "
            f"all, ≈ ${r.more_usd:.2f} at this run's price")


def check_options(batch: Any, max_conversations: Any, alpha: Any, target_diff: Any, method: Any, seed: Any) -> None:
    """Every sequential option, before anything is read, sent or written (one ConfigError)."""
    conversations(batch, "batch")
    if max_conversations is not None:
        conversations(max_conversations, "max_conversations")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < 1:
        raise ConfigError(f"alpha must be a number between 0 and 1, got {alpha!r}")
    if target_diff is not None and (isinstance(target_diff, bool) or not isinstance(target_diff, (int, float))
                                    or not math.isfinite(target_diff) or target_diff <= 0):
        raise ConfigError(f"target_diff must be a positive number or None, got {target_diff!r}")
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an integer, got {seed!r}")


def _orders(a: list, b: list, seed: int, limit: int | None) -> tuple[list, list, bool]:
    """Each side's conversations in the scoring order: paired (the same ids on both sides) one permutation for
    both, else one per side; at most ``limit`` of each."""
    rng = np.random.default_rng(seed)
    ids_a, ids_b = [c.conv_id for c in a], [c.conv_id for c in b]
    paired = sorted(ids_a) == sorted(ids_b) and len(set(ids_a)) == len(ids_a)
    order_a = [a[i] for i in rng.permutation(len(a))]
    if paired:
        by_id = {c.conv_id: c for c in b}
        order_b = [by_id[c.conv_id] for c in order_a]
    else:
        order_b = [b[i] for i in rng.permutation(len(b))]
    return order_a[:limit], order_b[:limit], paired


def _conversation_scores(run_dir: Path, aspects: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    """Rows ``ids``, columns ``aspects``: a conversation's dialogue score, or its turns' mean (NaN: none)."""
    s = from_dir(run_dir).scores(aspects).groupby(["conv_id", "aspect"])["pred"].mean().unstack()
    return s.reindex(index=list(ids), columns=list(aspects)).to_numpy(float)


def _evaluated(convs: list, logs: Path, run: dict, out: Path | None, **how: Any) -> Any:
    """``face evaluate`` of ``convs`` (written to ``logs``) without its console output: its finished run."""
    write_conversations(convs, logs)
    with contextlib.redirect_stdout(io.StringIO()):
        done, _ = evaluation(str(logs), out=None if out is None else str(out), **how, **run)
    return done


def _step(convs: list, tmp: Path, out: Path, run: dict, cap: float | None, used: dict) -> None:
    """One side's conversations scored so far, evaluated into ``out`` (what earlier steps scored: from the cache)
    with what is left of the cost cap as its own (``llm.force``: its estimate counts the cached ones too); what it
    sent added to ``used``, also when it stops (its ``llm_usage.json`` is written then too)."""
    if cap is not None:
        left = max(cap - used["cost_usd"], 0.0)
        run = {**run, "settings": {**run["settings"], "llm.max_cost_usd": left, "llm.force": True}}
    usage = out / "llm_usage.json"
    usage.unlink(missing_ok=True)  # an earlier step's, if this one writes none
    try:
        _evaluated(convs, tmp / f"{out.name}.json", run, out, overwrite=True)
    finally:
        totals = json.loads(usage.read_text(encoding="utf-8"))["totals"] if usage.exists() else {}
        for k in COUNTS:
            used[k] += totals.get(k, 0) or 0


def _estimate(convs: list, tmp: Path, run: dict) -> tuple[pd.Series, float | None]:
    """The estimate of scoring ``convs``, and the cost cap (llm.max_cost_usd) of the settings."""
    done = _evaluated(convs, tmp / "estimate.json", run, None, estimate_only=True)
    assert done.estimate is not None  # the live method has an LLM job
    cap = done.cfg.llm.get("max_cost_usd")
    total = done.estimate[done.estimate["stage"] == "total"].iloc[0][list(COUNTS)].astype(float)
    return total, None if cap is None else float(cap)


def compare_sequential(baseline: Any, candidate: Any, aspects: Sequence[str] | str | None = None, llm: str = "local",
                       *, out: str | os.PathLike, names: Sequence[str] | None = None, batch: int = 5,
                       max_conversations: int | None = None, seed: int = 0, alpha: float = 0.05,
                       target_diff: float | None = None, method: str = "betting", overwrite: bool = False,
                       overrides: Sequence[str] = (), entry: str = "api",
                       confirm: Callable[[float], bool] | None = None, echo: Callable[[str], None] = print,
                       **settings: Any) -> SequentialResult | None:
    """Compare two sets of conversations (files as ``face.evaluate`` reads them), scoring them with FACE only until
    every aspect is decided (module doc). ``batch``: conversations per side per step; ``max_conversations``: at most
    this many per side; ``alpha``: the family's error (each aspect at α / K); ``target_diff``: an interval inside
    ±target_diff decides "no difference larger than target"; ``method``: the confidence sequence (betting, eb,
    asymptotic); ``confirm``: asked with the estimated $ of scoring everything, before anything is sent (False: None
    returned, nothing sent). ``settings`` / ``overrides``: as ``face.evaluate``'s. ConfigError / DataError before
    anything is sent or written."""
    check_options(batch, max_conversations, alpha, target_diff, method, seed)
    if out is None or not str(out).strip():
        raise ConfigError("out: give the directory of the sequential comparison")
    out = Path(os.path.abspath(os.fspath(out)))
    names = list(names) if names is not None else [Path(os.fspath(baseline)).stem, Path(os.fspath(candidate)).stem]
    if len(names) != 2 or len(set(names)) != 2 or not all(str(n).strip() for n in names):
        raise ConfigError(f"names: two distinct names for the two sides, got {names!r}")
    with tempfile.TemporaryDirectory(prefix="face-seq-") as tmp_name:
        tmp = Path(tmp_name)
        sides = [source_of(s, tmp)[1] for s in (baseline, candidate)]
        order_a, order_b, paired = _orders(sides[0], sides[1], seed, max_conversations)
        # the aspects asked (None: CRSArena-Eval's seven, as face.evaluate's default)
        aspect_list = ([a.strip() for a in aspects.split(",")] if isinstance(aspects, str)
                       else list(ASPECTS if aspects is None else aspects))
        # what every face evaluate run of the comparison is given besides its conversations and directory
        run = {"aspects": aspect_list, "llm": llm, "overrides": overrides, "entry": entry, "settings": settings}
        (avail_a, cap), (avail_b, _) = (_estimate(side, tmp, run) for side in sides)
        avail = avail_a + avail_b
        setting = "--out" if entry == "cli" else "out"
        require_writable_dir(out, setting)
        if confirm is not None and not confirm(float(avail["cost_usd"])):
            return None
        how = f"pass {'--overwrite' if entry == 'cli' else 'overwrite=True'} to replace them"
        # out: one sequential comparison's (any of them may continue there), each side's run and the report inside
        with claimed([Location(setting, out)], {"face": "sequential comparison"}, [], overwrite, how):
            limited = len(order_a) < len(sides[0]) or len(order_b) < len(sides[1])
            return _loop(order_a, order_b, paired, names, tmp, out, run, batch, alpha, target_diff,
                         method, avail, [len(side) for side in sides], cap, echo, limited)


def _loop(order_a, order_b, paired, names, tmp, out, run, batch, alpha, target_diff, method,
          avail, sizes, cap, echo, limited) -> SequentialResult:
    aspects = run["aspects"]
    dirs = [out / names[0], out / names[1]]
    used = {k: 0.0 for k in COUNTS}
    seq, rows = None, []
    stop = "--max-conversations ran out" if limited else "the conversations ran out"
    n_steps = -(-max(len(order_a), len(order_b)) // batch)
    done_a = done_b = 0
    for step in range(1, n_steps + 1):
        na, nb = min(step * batch, len(order_a)), min(step * batch, len(order_b))
        try:
            for convs, d in ((order_a[:na], dirs[0]), (order_b[:nb], dirs[1])):
                _step(convs, tmp, d, run, cap, used)
        except BudgetExceeded as e:
            if seq is None:
                raise  # not one step finished: nothing to compare (what was scored is cached)
            which = f"the cost cap (llm.max_cost_usd = {cap:g})" if cap is not None else "a budget cap (llm.max_calls)"
            stop = (f"{which} ran out inside step {step}: the comparison is of the {step - 1} steps finished; what "
                    f"step {step} scored is cached (the same command with a larger cap continues from it)")
            log.info("step %d stopped: %s", step, e)
            for convs, d in ((order_a[:done_a], dirs[0]), (order_b[:done_b], dirs[1])):
                _step(convs, tmp, d, run, cap, used)  # back to the steps finished, from the cache
            break
        if seq is None:
            meta = from_dir(dirs[0])
            scales = [(min(meta.aspects[a].scale), max(meta.aspects[a].scale)) for a in aspects]
            seq = SequentialComparison(list(aspects), scales, alpha, target_diff, paired, method)
        status = seq.update(_conversation_scores(dirs[0], aspects, [c.conv_id for c in order_a[done_a:na]]),
                            _conversation_scores(dirs[1], aspects, [c.conv_id for c in order_b[done_b:nb]]))
        done_a, done_b = na, nb
        rows.append(status.assign(step=step, scored=na + nb))
        echo(f"step {step}: {na} + {nb} conversations scored; " + "; ".join(
            f"{r.aspect} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] {r.decision}" for r in status.itertuples()))
        if seq.done():
            stop = "every aspect is decided"
            break
        if cap is not None and used["cost_usd"] >= cap:
            stop = f"the cost cap (llm.max_cost_usd = {cap:g}) ran out"
            break
    if seq is None:
        raise ConfigError(f"nothing was scored: {stop}")
    comp = compare(str(dirs[0]), str(dirs[1]), names=names, aspects=list(aspects),
                   pairing="paired" if paired else "unpaired", alpha=alpha, target_diff=target_diff)
    steps = pd.concat(rows, ignore_index=True)
    decisions = steps[steps["step"] == steps["step"].max()].drop(columns=["step"]).reset_index(drop=True)
    decisions = _needs(decisions, target_diff, min(sizes), float(avail["cost_usd"]) / sum(sizes))
    scored_est = _estimate(order_a[:done_a], tmp, run)[0] + _estimate(order_b[:done_b], tmp, run)[0]
    saved = _saved(done_a + done_b, sum(sizes), scored_est, avail, used)
    _write(comp, steps, decisions, saved, stop, out / "comparison")
    return SequentialResult(comp, steps, decisions, saved, stop, out, min(sizes))


def _needs(decisions: pd.DataFrame, target: float | None, available: int, usd_per_conversation: float
           ) -> pd.DataFrame:
    """The decisions with, per undecided aspect, ``needed_per_side``: an estimate of the conversations per side it
    would need (``face.sequential.conversations_needed``; inf: no width decides it) and ``more_usd``: the $ of the
    conversations more on both sides at the run's price (estimated $ per conversation; NaN: beyond ``available``).
    Both NaN for a decided aspect."""
    need, usd = [], []
    for r in decisions.itertuples():
        n = min(r.n_baseline, r.n_candidate)
        m = conversations_needed(r.ci_low, r.ci_high, n, target) if r.decision == "undecided" else math.nan
        need.append(m)
        usd.append(2 * (m - n) * usd_per_conversation if m <= available else math.nan)
    return decisions.assign(needed_per_side=need, more_usd=usd)


def _saved(n_scored: int, n_avail: int, scored: pd.Series, avail: pd.Series, used: dict) -> pd.DataFrame:
    """Conversations, and the estimate's requests, tokens and $, scored vs available; and what this run sent."""
    counted: list[tuple[str, float, float]] = [("conversations", n_scored, n_avail)]
    counted += [(f"{k} (estimate)", float(scored[k]), float(avail[k])) for k in COUNTS]
    rows = [(what, s, a, a - s, (a - s) / a if a > 0 else 0.0) for what, s, a in counted]
    rows += [(f"{k} sent by this run", used[k], np.nan, np.nan, np.nan) for k in COUNTS]
    return pd.DataFrame(rows, columns=["what", "scored", "available", "saved", "saved_share"])


def _write(comp, steps, decisions, saved, stop, out) -> None:
    from face.comparison import figures  # matplotlib and seaborn: loaded only when there is something to draw
    from face.comparison.report import write_all

    write_all(comp, out, overwrite=True, setting="--out")
    note = f"Sequential comparison (stopped: {stop}). Scored by: {comp.judge}."
    write_table(steps, out, "sequential_steps", f"{note} Per step: each aspect's confidence sequence.")
    write_table(decisions, out, "sequential", f"{note} The decisions where the scoring stopped.")
    write_table(saved, out, "sequential_saved", f"{note} What was scored vs available.")
    for aspect in decisions["aspect"]:
        figures.save(figures.sequence(steps[steps["aspect"] == aspect], aspect, note),
                     out / "figures" / f"sequential_{aspect}.png")


__all__ = ["SequentialResult", "compare_sequential"]
