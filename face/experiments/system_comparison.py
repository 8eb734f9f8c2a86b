"""``face compare``'s tests checked on CRSArena-Eval's nine systems with the released judgements (no LLM).

* Agreement: the 36 pairs × 7 aspects compared as ``face compare --by-system`` compares them (unpaired, Holm over
  the 252 tests), on FACE's scores and, beside it, on the human labels; FACE's separated pairs checked against the
  direction of the human labels' means and of the arena's Bradley–Terry ranking (CRSArena-Dial votes).
* Calibration: random halves of each system compared with each other (unpaired and paired), ≥ 200 splits: the
  false-positive rate per test, and after Holm (per split: 9 systems × 7 aspects) the family-wise rate.
* Power: n conversations per system subsampled; how often FACE recovers the human ordering of each pair.
Items: the labelled turns / conversations with a FACE prediction (as ``system_level``), the human side on the same.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from pydantic import Field

from face import arena_ranking as arena
from face.comparison import engine, figures, stats, validation
from face.comparison.runs import RELEASED_JUDGE, Run, particle_means
from face.data import RELEASED_PARTICLES
from face.datasets.face_released import load_released_particles
from face.experiments.common import Parts, Plan, arena_files, arena_votes, experiment, own_settings
from face.experiments.result import ExperimentResult, Table
from face.metaeval import items
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions
from face.settings import settings as typed

HUMAN_LABEL = "human labels of CRSArena-Eval (the annotators' scores, averaged per item as released)"


@typed("comparison", conf="experiment/system_comparison.yaml:comparison")
class Settings:
    """``comparison:`` of conf/experiment/system_comparison.yaml (None: enough resamples for Holm's family)."""

    alpha: float = Field(gt=0, lt=0.5)
    n_boot: int | None = Field(ge=200)
    calibration_splits: int = Field(ge=1)
    calibration_boot: int | None = Field(ge=200)
    power_sizes: list[int | None]
    power_reps: int = Field(ge=1)
    power_boot: int | None = Field(ge=200)
    arena_boot: int | None = Field(ge=200)


def parts(cfg: DictConfig) -> Parts:
    """The arena votes and the released particles to fetch; the ``comparison:`` settings, checked with the others."""
    own_settings(Settings, cfg, "comparison")
    return Parts(extra_files=(*arena_files(cfg), RELEASED_PARTICLES))


def _runs(ctx, preds: Predictions, particles: pd.DataFrame, label: str) -> tuple[Run, Run]:
    """FACE's predictions and the human labels on the same labelled, predicted items, as two runs."""
    df = {a.name: items(preds, ctx.convs, a).dropna(subset=["pred"]).assign(aspect=a.name) for a in ctx.aspects}
    t = pd.concat([df[a.name] for a in ctx.aspects if a.level == "turn"])
    d = pd.concat([df[a.name] for a in ctx.aspects if a.level != "turn"])
    systems = {c.conv_id: c.system for c in ctx.convs}

    def run(name: str, col: str, label: str) -> Run:  # the column ``col`` (pred or human) as the predictions
        p = Predictions(t[["aspect", "conv_id", "turn_ind", col]].set_axis(TURN_COLUMNS, axis=1),
                        d[["aspect", "conv_id", col]].set_axis(DIALOGUE_COLUMNS, axis=1))
        return Run(name, "CRSArena-Eval", p, label, RELEASED_JUDGE if col == "pred" else "human annotators",
                   "released", {a.name: "released" for a in ctx.aspects}, {a.name: a for a in ctx.aspects}, systems)

    face = run("FACE", "pred", label)
    face.particles = particles
    return face, run("human labels", "human", HUMAN_LABEL)


def _particles(ctx, scores: pd.DataFrame) -> pd.DataFrame:
    """The released per-particle scores with their dialogue act and mention (for what moved)."""
    rows = [(t.conv_id, t.turn_ind, i, p.dialogue_act, p.mention)
            for t in load_released_particles(ctx.data_dir / RELEASED_PARTICLES) for i, p in enumerate(t.particles)]
    meta = pd.DataFrame(rows, columns=["conv_id", "turn_ind", "particle_ind", "dialogue_act", "mention"])
    return particle_means(scores.merge(meta, on=["conv_id", "turn_ind", "particle_ind"], how="inner"))


def _agreement(face: Run, human: Run, aspects: list[str], votes: list, prior: float, s: Settings, seed: int):
    """Every pair × aspect tested as ``face compare --by-system`` tests it, on FACE's scores and on the human labels,
    beside the arena's test of the pair: Bradley–Terry on the votes, and on the votes resampled (enough replicates
    for Holm over the pairs, as ``face compare`` takes)."""
    names = sorted(set(face.systems.values()))
    arena_boot = s.arena_boot or stats.boot_size(len(names) * (len(names) - 1) // 2, s.alpha, 0)
    point = arena.bradley_terry(arena.pair_counts(votes, names), prior)
    arena_tab = validation.arena_tests(arena.bootstrap_ratings(votes, names, arena_boot, seed, prior), point, names)
    opts = engine.Options(n_boot=s.n_boot, seed=seed, alpha=s.alpha)
    face_cmp = engine.build(face.by_system(), aspects, opts)
    human_cmp = engine.build(human.by_system(), aspects, opts)
    table = validation.agreement(face_cmp.differences, human_cmp.differences, arena_tab, s.alpha)
    return table, validation.agreement_summary(table), face_cmp, arena_boot


def _power(face_units, human_units, aspects: list[str], table: pd.DataFrame, s: Settings, seed: int):
    pairs = list(dict.fromkeys(zip(table["baseline"], table["candidate"])))
    hmean = {n: u.sums.sum(0) / u.counts.sum(0) for n, u in human_units.items()}
    direction = {(a, b): np.sign(hmean[b] - hmean[a]) for a, b in pairs}
    largest = max(len(u) for u in face_units.values())
    sizes = [n for n in s.power_sizes if n is None or n < largest]  # n ≥ every system's count: that is "all"
    n_boot = s.power_boot or stats.boot_size(len(aspects), s.alpha)
    raw = validation.power(face_units, direction, aspects, sizes, s.power_reps, n_boot, s.alpha, seed)
    separated = set(table.loc[table["human_separates"], ["baseline", "candidate", "aspect"]].itertuples(False, None))
    human = [cell in separated for cell in zip(raw["system_a"], raw["system_b"], raw["aspect"])]
    raw = raw.assign(human_separated=human, human_recovered=raw["recovered"].astype(float).where(human))
    out = raw.groupby(["n", "aspect"], sort=False).agg(
        recovered_all_pairs=("recovered", "mean"), wrong_direction=("wrong_direction", "mean"),
        recovered_human_separated=("human_recovered", "mean"), human_separated_pairs=("human_separated", "sum"))
    out["human_separated_pairs"] //= s.power_reps
    return out.reset_index(), n_boot, [n for n in s.power_sizes if n not in sizes]


def run(plan: Plan) -> ExperimentResult:
    s = own_settings(Settings, plan.cfg, "comparison")
    with experiment(plan) as ctx:
        start, seed = time.perf_counter(), ctx.settings.seed
        out = ctx.predict()
        face, human = _runs(ctx, out.predictions, _particles(ctx, out.particle_scores), out.label)
        aspects = [a.name for a in ctx.aspects]
        votes = arena_votes(ctx)
        table, summary, face_cmp, arena_boot = _agreement(face, human, aspects, votes, ctx.cfg.arena.prior, s, seed)
        t_agree = time.perf_counter() - start
        face_units = {r.name: engine.units_of(r, aspects) for r in face.by_system()}
        human_units = {r.name: engine.units_of(r, aspects) for r in human.by_system()}
        cal_boot = s.calibration_boot or stats.boot_size(len(face_units) * len(aspects), s.alpha)
        cal = validation.calibration(face_units, aspects, s.calibration_splits, cal_boot, s.alpha, seed)
        cal = validation.calibration_summary(cal, s.alpha)
        t_cal = time.perf_counter() - start - t_agree
        pw, pw_boot, dropped = _power(face_units, human_units, aspects, table, s, seed)
        t_power = time.perf_counter() - start - t_agree - t_cal
        face_cmp.write(ctx.run_dir / "nine_systems")  # the whole comparison (report.html, every table) in the run dir
        src = (f"{out.label}; {ctx.subset}; 9 CRSs; human labels of CRSArena-Eval on the same items; arena: "
               f"Bradley–Terry of {len(votes)} CRSArena-Dial votes.")
        agree = (f"Agreement: the 36 pairs of systems × 7 aspects, each tested as `face compare --by-system` tests "
                 f"it (unpaired studentized bootstrap, {face_cmp.settings['n_boot']} resamples of conversations "
                 f"within each system, Holm over the 252 tests, α = {s.alpha}), on FACE's scores and on the human "
                 f"labels; the arena's pairs tested on its Bradley–Terry ratings ({arena_boot} resamples of the "
                 "votes, Holm over the 36 pairs; the votes are overall preferences, so one arena test per pair serves "
                 "every aspect). Of the cells FACE separates: confirmed (the reference separates them in the same "
                 "direction), contradicted (in the other), unconfirmed (the reference does not separate them: neither "
                 "agreement nor disagreement); against_human_means: separated against the sign of a non-zero human "
                 f"mean difference. {src}")
        calib = (f"Calibration: each system's conversations split at random into two halves "
                 f"({s.calibration_splits} splits, {cal_boot} resamples per test), halves compared unpaired and "
                 "paired (the i-th conversations of the halves paired). fpr: rejections per test at α before "
                 "correction, with its Monte Carlo error (sd of the per-split rates / √splits); familywise_holm: "
                 "splits with any rejection after Holm over the split's 63 tests (9 systems × 7 aspects), binomial "
                 f"error. {src}")
        gone = f" (n = {', '.join(map(str, dropped))}: not below every system's count, i.e. all)" if dropped else ""
        power = (f"Power: n conversations per system drawn without replacement (a system with fewer keeps all), "
                 f"{s.power_reps} draws per n{gone}; each pair tested over its 7 aspects (Holm over 7, "
                 f"{pw_boot} resamples); recovered: separated in the direction of the full-data human means. {src}")
        return ctx.result(
            output=out, extra={"comparison": face_cmp},
            tables={"agreement": Table(summary, agree),
                    "agreement_pairs": Table(table, f"Every pair × aspect. {agree}", 4),
                    "calibration": Table(cal, calib, 4), "power": Table(pw, power),
                    "ranking": Table(face_cmp.ranking, f"FACE's ranking of the nine CRSs with rank intervals (face "
                                                       f"compare). {src}")},
            figures={"figures/power.png": lambda p: figures.save(figures.power_curve(pw, power), p),
                     "figures/beats_dialogue_overall.png": lambda p: figures.save(figures.beats(
                         face_cmp.beats, "dialogue_overall", f"Scored by: {out.label}"), p)},
            shown=[(f"Agreement. {agree}", summary), (f"Calibration. {calib}", cal[cal["aspect"] == "all aspects"]),
                   (f"Power. {power}", pw.groupby("n", sort=False)[["recovered_all_pairs", "wrong_direction"]]
                    .mean().reset_index()),
                   f"Runtime (wall): agreement {t_agree:.0f} s, calibration {t_cal:.0f} s, power {t_power:.0f} s"],
            metrics={**_metrics(summary, cal), "runtime_s.agreement": t_agree, "runtime_s.calibration": t_cal,
                     "runtime_s.power": t_power})


def _metrics(summary: pd.DataFrame, cal: pd.DataFrame) -> dict[str, float]:
    total = summary[summary["aspect"] == "all aspects"].iloc[0]
    out = {f"agreement.{k}": float(total[k]) for k in summary.columns if k != "aspect"}
    for r in cal[cal["aspect"] == "all aspects"].itertuples():
        out[f"calibration.{r.mode}.fpr"] = r.fpr
        out[f"calibration.{r.mode}.familywise_holm"] = r.familywise_holm
    # the headline (MLflow metrics; the rest goes to numbers.json): names that differ within 12 characters
    separated = float(total["face_separated"])
    out["summary.confirmed_by_humans"] = float(total["confirmed_by_humans"]) / separated if separated else float("nan")
    out["summary.separated_pairs"] = separated
    if "calibration.unpaired.fpr" in out:
        out["summary.false_positive_rate"] = float(out["calibration.unpaired.fpr"])
    return out
