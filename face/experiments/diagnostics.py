"""The paper's interpretability analysis on the released judgements (no LLM): mean particle score per CRS ×
dialogue act × aspect, the share of each act per CRS, where low-scoring particles fall, the lowest-scoring
particles of each CRS with their text, and the HTML report of every conversation."""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig

from face.data import RELEASED_PARTICLES, released_instructions_file
from face.datasets.face_released import load_instructions, load_released_particles
from face.experiments.common import Parts, Plan, experiment, released_scores
from face.experiments.result import ExperimentResult, Table
from face.pipeline.aggregate import aggregate
from face.pipeline.released import LABEL
from face.report import diagnostic_report as diagnostics
from face.report import figures


def released_instruction_texts(data_dir, aspects) -> dict[str, dict[str, str]]:
    """aspect → instruction id → text of the released instructions the scores were judged under (for the report's
    hover texts); an aspect whose file is not there is left out."""
    paths = {a.name: data_dir / released_instructions_file(a.name) for a in aspects}
    return {a: {i.instruction_id: i.text for i in load_instructions(p)} for a, p in paths.items() if p.exists()}


def parts(cfg: DictConfig) -> Parts:
    return Parts(extra_files=(RELEASED_PARTICLES,))


def run(plan: Plan) -> ExperimentResult:
    with experiment(plan) as ctx:
        scores = released_scores(ctx, "reads the released judgements")
        ids = {c.conv_id for c in ctx.convs}
        particles = {(r.conv_id, r.turn_ind): r.particles
                     for r in load_released_particles(ctx.data_dir / RELEASED_PARTICLES) if r.conv_id in ids}
        d = diagnostics.diagnose(scores, particles, ctx.convs, ctx.cfg.diagnostics.worst_n)
        what = (f"{ctx.subset}; particles: the authors' released decomposition; a particle's score is its mean over "
                "the 16 instructions.")
        note = f"{LABEL}; {what}"  # the report.html names LABEL once, at its top
        tables = {name: Table(table, f"Diagnostics, {name.replace('_', ' ')}. {note}")
                  for name, table in d.items() if name != "particles"}  # particles: in the HTML report
        drawn = {**{f"figures/by_act_{a.name}.png": partial(figures.act_heatmap, d["by_act"], a.name, (a.low, a.high),
                                                            note) for a in ctx.aspects},
                 "figures/act_share.png": partial(figures.act_share_bars, d["act_share"], note),
                 "figures/low_by_position.png": partial(figures.position_curve, d["by_position"], note)}
        report = (ctx.run_dir if ctx.cfg.diagnostics.html_in_run_dir else ctx.out_dir) / "report.html"
        drawn[str(report)] = partial(diagnostics.write_html, title=f"FACE diagnostics — {ctx.subset}", note=what, d=d,
                                     scores=scores, preds=aggregate(scores, ctx.inputs().levels), convs=ctx.convs,
                                     aspects=ctx.aspects, llm=LABEL,
                                     instructions=released_instruction_texts(ctx.data_dir, ctx.aspects))
        share = d["act_share"].pivot(index="system", columns="dialogue_act", values="share").reset_index()
        return ctx.result(tables=tables, figures=drawn, extra={"diagnostics": d},
                          shown=[(f"Share of each dialogue act per CRS. {note}", share), f"HTML report: {report}"],
                          metrics={"conversations": len(ctx.convs),  # counts: numbers.json, not MLflow metrics
                                   "dialogue_acts": len(share.columns) - 1})
