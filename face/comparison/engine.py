"""The comparison engine: runs → systems → per-aspect means, pairwise differences, ranking, what moved.

``compare(run_a, run_b, …)`` is ``face compare``'s engine and ``face.compare``: each argument is a run (a path, an
MLflow run id, a ``face.Result``; ``face.comparison.runs``), each run one system (``by_system``: one system per
``system`` of its conversations). Pairs are (baseline, candidate) in the order given, the difference candidate −
baseline; the verdict says whether the candidate is better, worse, or not detectably different (never "equal").
"""

from __future__ import annotations

import itertools
from typing import Any, Literal, Sequence

import numpy as np
import pandas as pd
from pydantic import Field

from face.comparison import stats
from face.comparison.checks import aspect_of, check, in_scale
from face.comparison.comparison import Comparison
from face.comparison.moved import what_moved
from face.comparison.runs import Run, load
from face.errors import ConfigError
from face.resample import draw_counts, percentile_interval
from face.settings import settings

VERDICTS = ("better", "worse", "no detectable difference")
MIN_SHARED = 0.5  # pairing="auto": paired when the shared conversations are at least this share of each run's


@settings("")
class Options:
    """How to compare (``face compare``'s options; ``n_boot`` None: enough for Holm over every test, ≥ 10 000)."""

    pairing: Literal["auto", "paired", "unpaired"] = "auto"
    n_boot: int | None = Field(default=None, ge=200, le=1_000_000)
    seed: int = Field(default=0, ge=0)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    power: float = Field(default=0.8, gt=0.05, lt=1)
    target_diff: float | None = Field(default=None, gt=0)
    top: int = Field(default=5, ge=1, le=1000)  # rows per aspect in "what moved"


def units_of(run: Run, aspects: Sequence[str]) -> stats.Units:
    """The run's scores per conversation (sorted ids) and aspect: sums and counts of its turn / dialogue scores."""
    rows = run.scores(aspects)
    ids = np.array(sorted(run.conv_ids()), dtype=object)
    sums, counts = np.zeros((len(ids), len(aspects))), np.zeros((len(ids), len(aspects)))
    g = rows.groupby(["conv_id", "aspect"])["pred"].agg(["sum", "count"])  # empty: nothing to place
    r = np.searchsorted(ids, g.index.get_level_values(0).to_numpy(dtype=object))
    k = pd.Index(list(aspects)).get_indexer(g.index.get_level_values(1))
    sums[r, k], counts[r, k] = g["sum"].to_numpy(), g["count"].to_numpy()
    return stats.Units(ids, sums, counts)


def _mode(pairing: str, shared: int, n_a: int, n_b: int, names: tuple[str, str]) -> str:
    if pairing == "unpaired":
        return "unpaired"
    if pairing == "paired":
        if shared < 2:
            raise ConfigError(f"pairing=paired: {names[0]} and {names[1]} share {shared} conversation id(s); "
                              "a paired comparison needs at least 2 (pairing=auto decides by itself)")
        return "paired"
    return "paired" if shared >= 2 and shared >= MIN_SHARED * max(n_a, n_b) else "unpaired"


class _Engine:
    """One comparison's systems, their draws and moments (the draws made once, in a fixed order, from ``seed``)."""

    def __init__(self, runs: Sequence[Run], aspects: Sequence[str], opts: Options):
        self.runs, self.aspects, self.opts = list(runs), list(aspects), opts
        self.units = [units_of(r, aspects) for r in runs]
        n_tests = len(aspects) * len(runs) * (len(runs) - 1) // 2
        self.n_boot = opts.n_boot or stats.boot_size(n_tests, opts.alpha)
        self.rng = np.random.default_rng(opts.seed)
        same = all(len(u) == len(self.units[0]) and np.array_equal(u.ids, self.units[0].ids) for u in self.units)
        self.joint = opts.pairing != "unpaired" and same and len(self.units[0]) >= 2
        if self.joint:  # every system on the same conversations: one draw for all (paired tests, joint ranks)
            self.draws = [draw_counts(len(self.units[0]), self.n_boot, self.rng)] * len(runs)
        else:
            self.draws = [draw_counts(len(u), self.n_boot, self.rng) for u in self.units]
        self.moments = [stats.moments(u, c) for u, c in zip(self.units, self.draws)]

    def means(self) -> pd.DataFrame:
        rows = []
        for k, a in enumerate(self.aspects):
            for run, u, m in zip(self.runs, self.units, self.moments):
                lo, hi = percentile_interval(m.boot_mean[:, k], self.opts.confidence)
                rows.append((a, run.name, m.mean[k], lo, hi, int((u.counts[:, k] > 0).sum()),
                             int(u.counts[:, k].sum())))
        return pd.DataFrame(rows, columns=["aspect", "system", "mean", "ci_low", "ci_high", "conversations",
                                           "scores"])

    def pair(self, i: int, j: int) -> tuple[stats.PairTest, str, int, np.ndarray, stats.Units, stats.Units]:
        """(test, pairing, shared conversations, per-conversation variance of the difference, the rows compared of
        i and of j) of j − i: paired, the shared conversations of both, aligned; unpaired, every conversation."""
        a, b = self.units[i], self.units[j]
        shared = np.intersect1d(a.ids, b.ids)
        mode = _mode(self.opts.pairing, len(shared), len(a), len(b), (self.runs[i].name, self.runs[j].name))
        if mode == "unpaired":
            ma, mb = self.moments[i], self.moments[j]
            var = ma.var * len(a) + mb.var * len(b)
            return stats.unpaired(ma, mb, self.opts.confidence), mode, len(shared), var, a, b
        a, b = a.take(np.searchsorted(a.ids, shared)), b.take(np.searchsorted(b.ids, shared))
        counts = self.draws[i] if self.joint else draw_counts(len(shared), self.n_boot, self.rng)
        test = stats.paired(a, b, counts, self.opts.confidence)
        return test, mode, len(shared), test.se ** 2 * len(shared), a, b

    def differences(self) -> pd.DataFrame:
        """Per pair × aspect: the means of the rows compared (paired: the shared conversations), their difference
        and test, Holm over the family, the verdict, and the difference / conversations sized for that verdict."""
        rows, sizing = [], []
        for i, j in itertools.combinations(range(len(self.runs)), 2):
            test, mode, shared, var, a, b = self.pair(i, j)
            n = np.minimum((a.counts > 0).sum(0), (b.counts > 0).sum(0))  # conversations scored on each aspect
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_a, mean_b = a.sums.sum(0) / a.counts.sum(0), b.sums.sum(0) / b.counts.sum(0)
                q = np.where(test.se > 0, (test.ci_high - test.ci_low) / (2 * test.se), np.nan)
            sizing += [(test.se[k], n[k] - 1, q[k], var[k]) for k in range(len(self.aspects))]
            for k, asp in enumerate(self.aspects):
                rows.append((asp, self.runs[i].name, self.runs[j].name, mode, len(self.units[i]),
                             len(self.units[j]), shared, mean_a[k], mean_b[k], test.diff[k], test.ci_low[k],
                             test.ci_high[k], test.p_value[k]))
        df = pd.DataFrame(rows, columns=["aspect", "baseline", "candidate", "pairing", "n_baseline", "n_candidate",
                                         "n_shared", "baseline_mean", "candidate_mean", "diff", "ci_low", "ci_high",
                                         "p_value"])
        df.insert(df.columns.get_loc("p_value") + 1, "p_holm", stats.holm(df["p_value"].to_numpy()))
        df.insert(df.columns.get_loc("p_holm") + 1, "verdict", verdicts(df["diff"], df["p_holm"], self.opts.alpha))
        se, dof, q, var = (np.array(c, float) for c in zip(*sizing))
        m = max(1, int(df["p_value"].notna().sum()))  # Holm's family: the tests with a p-value
        few = dof < 1  # fewer than 2 conversations on one side: no spread
        o = self.opts
        df["detectable_diff"] = np.where(few, np.nan, stats.detectable(se, dof, o.alpha, o.power, m, q))
        if o.target_diff:
            df["n_needed"] = np.where(few, np.nan, stats.needed(var, o.target_diff, o.alpha, o.power, m))
        return df

    def ranking(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Per aspect: each system's rank (1 = best) with its interval, and P(row beats column)."""
        names = [r.name for r in self.runs]
        lo_q, hi_q = 100 * (1 - self.opts.confidence) / 2, 100 * (1 + self.opts.confidence) / 2
        rank_rows, beat_rows = [], []
        for k, a in enumerate(self.aspects):
            boot = np.column_stack([m.boot_mean[:, k] for m in self.moments])
            point = stats.ranks(np.array([[m.mean[k] for m in self.moments]]))[0]
            rk = stats.ranks(boot)
            rows = [(a, name, int(point[s]), self.moments[s].mean[k],
                     int(np.percentile(rk[:, s], lo_q, method="lower")),
                     int(np.percentile(rk[:, s], hi_q, method="higher"))) for s, name in enumerate(names)]
            rank_rows += sorted(rows, key=lambda row: row[2])  # by rank, ties in the systems' order
            p = stats.beats(boot)
            beat_rows += [(a, x, y, p[s, t]) for s, x in enumerate(names) for t, y in enumerate(names) if s != t]
        return (pd.DataFrame(rank_rows, columns=["aspect", "system", "rank", "mean", "rank_low", "rank_high"]),
                pd.DataFrame(beat_rows, columns=["aspect", "system", "opponent", "p_beats"]))


def verdicts(diff: pd.Series, p_holm: pd.Series, alpha: float) -> list[str]:
    """better / worse where Holm's adjusted p < α (by the sign of candidate − baseline), else no detectable
    difference: a test that does not reject says nothing about equality."""
    return [VERDICTS[0] if p < alpha and d > 0 else VERDICTS[1] if p < alpha and d < 0 else VERDICTS[2]
            for d, p in zip(diff, p_holm)]


def _named(runs: list[Run]) -> list[Run]:
    """Distinct names: runs named alike (two directories called ``out``) are named by their source instead."""
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:
            r.name = r.source
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.name] = seen.get(r.name, 0) + 1
        if seen[r.name] > 1:
            r.name = f"{r.name} #{seen[r.name]}"
    return runs


def _names(value: Any, what: str) -> list[str] | None:
    """None or a list of names (a string is one name, not a list of its letters)."""
    if value is not None and (isinstance(value, str) or not isinstance(value, Sequence)
                              or not all(isinstance(v, str) for v in value)):
        raise ConfigError(f"{what} must be a list of names, e.g. ['v1', 'v2'], got {value!r}")
    return None if value is None else list(value)


def _systems(sources: Sequence[Any], names: Sequence[str] | None, by_system: bool, tracking_uri: str | None
             ) -> list[Run]:
    """The systems compared, with distinct names that every output can hold: not empty, not a credential (a name
    reaches every table, figure and MLflow key)."""
    from face.secrets import contains_secret, redact

    if names is not None and len(names) != len(sources):
        raise ConfigError(f"names: {len(names)} names for {len(sources)} runs")
    default = [f"run {i + 1}" if hasattr(s, "predictions") else None for i, s in enumerate(sources)]
    runs = [load(s, names[i] if names is not None else default[i], tracking_uri) for i, s in enumerate(sources)]
    systems = [s for r in runs for s in r.by_system()] if by_system else runs
    if len(systems) < 2:
        raise ConfigError(f"compare needs at least two systems, got {len(systems)}"
                          + ("" if by_system else " (one run with several systems: by_system=True / --by-system)"))
    for r in _named(systems):
        if not r.name.strip() or contains_secret(r.name):
            what = "a name that looks like a credential (an API key or token)" if r.name.strip() else "an empty name"
            raise ConfigError(f"names: the system of {redact(r.source)} has {what}; name it with --names / names=")
    return systems


def compare(*runs: Any, names: Sequence[str] | None = None, by_system: bool = False,
            aspects: Sequence[str] | None = None, allow_incomparable: bool = False,
            tracking_uri: str | None = None, **settings: Any) -> Comparison:
    """Compare two or more runs (paths, MLflow run ids, ``face.Result`` objects): see the module doc. ``settings``:
    ``Options``' fields (pairing, n_boot, seed, confidence, alpha, power, target_diff, top). A wrong type or value
    of any argument is a ConfigError, a score outside its aspect's scale a DataError."""
    from face.report.tables import ordered  # display order

    opts = Options(**settings)  # a ConfigError naming the setting (face.settings)
    for flag, value in (("by_system", by_system), ("allow_incomparable", allow_incomparable)):
        if not isinstance(value, bool):
            raise ConfigError(f"{flag} must be True or False, got {value!r}")
    if tracking_uri is not None and not isinstance(tracking_uri, str):
        raise ConfigError(f"tracking_uri must be a string or None, got {tracking_uri!r}")
    wanted = _names(aspects, "aspects")
    systems = _systems(runs, _names(names, "names"), by_system, tracking_uri)
    common = set.intersection(*(set(r.aspect_names()) for r in systems))  # the aspects every run scores
    chosen = [a for a in wanted if a in common] if wanted is not None else ordered(sorted(common))
    warnings = check(systems, chosen, allow_incomparable, wanted)
    if not chosen:
        raise ConfigError("no aspect is scored in every run" + (f" among {', '.join(wanted)}" if wanted else ""))
    in_scale(systems, chosen)
    return build(systems, chosen, opts, warnings)


def build(systems: Sequence[Run], aspects: Sequence[str], opts: Options, warnings: Sequence[str] = ()) -> Comparison:
    """The comparison of systems already loaded and checked."""
    with stats.one_thread():
        eng = _Engine(systems, aspects, opts)
        means, differences = eng.means(), eng.differences()
        ranking, beats = eng.ranking() if len(systems) >= 3 else (None, None)
    scales = {a: None if (s := aspect_of(systems[0], a)) is None else (s.low, s.high) for a in aspects}
    table = pd.DataFrame([(r.name, r.source, len(r.conv_ids()), r.judge or "not recorded", r.label) for r in systems],
                         columns=["system", "source", "conversations", "judge", "label"])
    settings = {**{k: getattr(opts, k) for k in ("pairing", "seed", "confidence", "alpha", "power", "target_diff")},
                "n_boot": eng.n_boot, "joint": eng.joint}
    n_tests = len(differences)
    if n_tests / (eng.n_boot + 1) >= opts.alpha:  # the smallest p, 1 / (B + 1), Holm-adjusted, cannot reach α
        warnings = [*warnings, f"WARNING: n_boot={eng.n_boot} is too few for Holm over {n_tests} tests: no "
                               f"difference can be declared (smallest adjusted p {n_tests / (eng.n_boot + 1):.3g}); "
                               f"use at least {stats.boot_size(n_tests, opts.alpha, 0)} or leave n_boot unset"]
    warnings = [*warnings, *(f"WARNING: {r.system} has {r.conversations} conversation(s) scored on {r.aspect}: "
                             "its differences cannot be sized (detectable_diff, n_needed left blank)"
                             for r in means[means["conversations"] < 2].itertuples(index=False))]
    moved = what_moved(systems[0], systems[1:], aspects, opts.top)
    return Comparison(table, means, differences, ranking, beats, moved, scales, list(warnings), settings,
                      {r.name: r.report for r in systems})

