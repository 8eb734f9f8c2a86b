"""``face.Result``: what ``face.evaluate`` returns, built from the run's typed result (``RunResult`` and the
experiment's ``ExperimentResult``), not read back from the files the run wrote beside it; and the diagnostics report of
a finished run directory (``build_report``: ``face report DIR``, and the last step of a run kept in ``out`` / ``--out``,
so that ``face report`` rebuilds exactly the report the run wrote)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from face.data.schema import Particle
from face.datasets.face_released import load_released_particles
from face.errors import ConfigError, DataError, require_writable_dir
from face.runfile import read_run_file, write_run_file

if TYPE_CHECKING:
    from face.experiments.result import ExperimentResult
    from face.methods import MethodOutput
    from face.runner import RunResult


@dataclass
class Result:
    """What ``face.evaluate`` returns. Tables are pandas DataFrames:

    * ``dialogues``: one row per conversation (``conv_id``, ``system``), a column per dialogue-level aspect;
    * ``turns``: one row per evaluated assistant turn (``conv_id``, ``system``, ``turn_ind``, ``utterance``), a
      column per turn-level aspect;
    * ``particles``: one row per aspect × particle × instruction: ``dialogue_act``, ``mention``, ``user_feedback``,
      ``instruction_id``, ``score`` (the expected score) and ``samples`` (the parsed draws; None = invalid);
    * ``correlations``: with human labels in the input, their correlations (``face.meta_evaluate``'s table), else
      None; ``estimate``: the cost estimate printed before the run; ``usage``: ``{"totals": ...}``, the LLM usage
      totals of ``llm_usage.json`` (requests, samples, HTTP requests, tokens, cost, cache hits; its per-request
      records stay in the file); ``settings``: what produced the numbers (``label``, ``llm``: model and backend,
      ``instructions``: each aspect's instruction texts by id).

    A score is missing (NaN) where FACE has none: a turn without particles, as in the authors' code."""

    dialogues: pd.DataFrame
    turns: pd.DataFrame
    particles: pd.DataFrame
    conversations: list = field(repr=False)
    predictions: Any = field(repr=False)  # face.predictions.Predictions: (aspect, conv_id, [turn_ind], pred)
    aspects: list = field(repr=False)  # face.aspects.Aspect of each evaluated aspect
    label: str = ""  # what produced the numbers: the LLM, its settings and the samples
    llm: str = ""  # the LLM's model name
    settings: dict = field(default_factory=dict, repr=False)  # label, llm, instructions
    usage: dict = field(default_factory=dict, repr=False)
    estimate: pd.DataFrame | None = field(default=None, repr=False)
    correlations: pd.DataFrame | None = field(default=None, repr=False)
    out_dir: Path | None = None  # where the run's files are (None: a temporary directory, removed)

    def to_run_file(self, path: str | os.PathLike) -> Path:
        """The predictions in the FACE authors' run-file format (their evaluation script reads it)."""
        return write_run_file(self.predictions, _file(path, "to_run_file", "the run file (JSON)"))

    def report(self, path: str | os.PathLike, tables: bool = False) -> Path:
        """The diagnostics report (HTML: every conversation -> turns -> particles, lowest scores highlighted);
        ``tables``: its tables as CSV too, in ``<path stem>_tables/``."""
        if not isinstance(tables, bool):
            raise ConfigError(f"report: tables must be True or False, got {tables!r}")
        from face.report.diagnostic_report import write_report

        path = _file(path, "report", "the HTML file")
        particles: dict[tuple[str, int], Sequence[Particle]] = {}
        first = self.particles.drop_duplicates(["conv_id", "turn_ind", "particle_ind"])
        for r in first[first["particle_ind"] >= 0].sort_values(["conv_id", "turn_ind", "particle_ind"]).itertuples():
            key = (str(r.conv_id), int(r.turn_ind))
            particles[key] = [*particles.get(key, ()), Particle(r.dialogue_act, r.mention, r.user_feedback)]
        return write_report(path, path.with_name(f"{path.stem}_tables") if tables else None, path.stem,
                            self.conversations, self.particles.dropna(subset=["score"]), particles, self.predictions,
                            {"label": self.label, "instructions": self.settings.get("instructions", {})},
                            run="face.evaluate", aspects=self.aspects)

    def lowest_particles(self, conv_id: str, aspect: str, turn_ind: int | None = None, k: int = 3) -> pd.DataFrame:
        """The ``k`` lowest-scoring particles of a conversation (or of one of its turns) for an aspect: one row each
        (``turn_ind``, ``particle_ind``, ``dialogue_act``, ``mention``, ``score`` = the mean over instructions)."""
        names = [a.name for a in self.aspects]
        if not isinstance(aspect, str) or aspect not in names:
            raise ConfigError(f"lowest_particles: aspect {aspect!r} is not one of the result's ({', '.join(names)})")
        if not isinstance(conv_id, (str, int)) or isinstance(conv_id, bool):
            raise ConfigError(f"lowest_particles: conv_id must be a conversation id (a string), got {conv_id!r}")
        if turn_ind is not None and (not isinstance(turn_ind, int) or isinstance(turn_ind, bool)):
            raise ConfigError(f"lowest_particles: turn_ind must be an integer or None, got {turn_ind!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError(f"lowest_particles: k must be a positive integer, got {k!r}")
        p = self.particles
        p = p[(p["aspect"] == aspect) & (p["conv_id"] == str(conv_id)) & (p["particle_ind"] >= 0)]
        if turn_ind is not None:
            p = p[p["turn_ind"] == turn_ind]
        per = (p.groupby(["turn_ind", "particle_ind", "dialogue_act", "mention"], dropna=False)["score"].mean()
               .reset_index())
        return per.sort_values(["score", "turn_ind", "particle_ind"]).head(k).reset_index(drop=True)

    def __repr__(self) -> str:
        aspects = ", ".join(a.name for a in self.aspects)
        where = f"; files in {self.out_dir}" if self.out_dir else ""
        return (f"face.Result({len(self.dialogues)} conversations, {len(self.turns)} assistant turns, "
                f"{self.particles[['conv_id', 'turn_ind', 'particle_ind']].drop_duplicates().shape[0]} particles; "
                f"aspects: {aspects}; {self.label}{where})")


def _file(path: Any, what: str, kind: str) -> Path:
    """A file the caller names for a Result method to write: a path whose directory can hold it, not a directory."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise ConfigError(f"{what}: the path must be a string or a Path, got {type(path).__name__}")
    if not str(os.fspath(path)).strip():
        raise ConfigError(f"{what}: the path is empty")
    path = Path(os.fspath(path)).expanduser()
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a directory; name {kind} to write")
    require_writable_dir(path.parent if str(path.parent) else Path("."), what)
    return path


def _wide(long: pd.DataFrame, keys: list[str], aspects: Sequence[Any]) -> pd.DataFrame:
    names = [a.name for a in aspects]
    if long.empty:
        return pd.DataFrame(columns=[*keys, *names])
    wide = long.pivot_table(index=keys, columns="aspect", values="pred", aggfunc="first").reset_index()
    wide.columns.name = None
    return wide.reindex(columns=[*keys, *names])


def _with_released_particles(particles: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """The authors' scores (method face_released) with the particles they scored: act, mention, feedback."""
    from face.data import RELEASED_PARTICLES

    if particles.empty or not (Path(data_dir) / RELEASED_PARTICLES).exists():
        return particles
    rows = {(t.conv_id, t.turn_ind, i): (p.dialogue_act, p.mention, p.user_feedback)
            for t in load_released_particles(Path(data_dir) / RELEASED_PARTICLES) for i, p in enumerate(t.particles)}
    keys = zip(particles["conv_id"], particles["turn_ind"], particles["particle_ind"])
    found = [rows.get((c, int(t), int(i)), (None, None, None)) for c, t, i in keys]
    for j, col in enumerate(("dialogue_act", "mention", "user_feedback")):
        particles[col] = [f[j] for f in found]
    return particles


def _particles(run: RunResult, exp: ExperimentResult, output: MethodOutput) -> pd.DataFrame:
    """One row per aspect × particle × instruction: the live method's stream (particle_scores.jsonl, too large to
    hold in memory at paper size), or the scores the method kept (face_released: the authors')."""
    from face.pipeline.records import DETAIL_FIELDS, read_score_file

    columns = ["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score", *DETAIL_FIELDS]
    scores_file = exp.run_dir / "particle_scores.jsonl"
    if scores_file.exists():
        return read_score_file(scores_file, detail=True)
    particles = output.particle_scores
    particles = pd.DataFrame(columns=columns) if particles is None else particles.copy()
    particles["conv_id"] = particles["conv_id"].astype(str)
    for col in columns:
        if col not in particles.columns:
            particles[col] = None
    return _with_released_particles(particles, Path(run.cfg.paths.data_dir))


def _settings(cfg: Any, exp: ExperimentResult, label: str) -> dict:
    """What produced the numbers: the label, the LLM (a method that calls one) and each aspect's instructions."""
    method: Any = next(iter(exp.methods.values()), None)
    if not getattr(method, "uses_llm", False):
        return {"label": label, "llm": {}, "instructions": {}}
    texts = {a.name: {i.instruction_id: i.text for i in method.instruction_set(Path(cfg.paths.data_dir), a)}
             for a in exp.aspects} if hasattr(method, "instruction_set") else {}
    return {"label": label, "llm": {"model": str(cfg.llm.model), "backend": str(cfg.llm.backend)},
            "instructions": texts}


def result_of(run: RunResult, keep: bool) -> Result:
    """The Result of a finished run (``keep``: its files stay in its output directory)."""
    exp = run.experiment
    assert exp is not None and exp.output is not None  # the runner finishes only a run that sent its requests
    output = exp.output
    convs, aspects = exp.conversations, exp.aspects
    preds = output.predictions
    meta = pd.DataFrame([(c.conv_id, c.system) for c in convs], columns=["conv_id", "system"])
    dialogues = meta.merge(_wide(preds.dialogue, ["conv_id"], [a for a in aspects if a.level == "dialogue"]),
                           on="conv_id", how="left")
    turn_rows = [(c.conv_id, c.system, t.turn_ind, t.utterance) for c in convs for t in c.evaluated_turns()]
    turns = pd.DataFrame(turn_rows, columns=["conv_id", "system", "turn_ind", "utterance"])
    turns = turns.merge(_wide(preds.turn, ["conv_id", "turn_ind"], [a for a in aspects if a.level == "turn"]),
                        on=["conv_id", "turn_ind"], how="left")
    settings = _settings(run.cfg, exp, output.label)
    totals = exp.usage_totals()
    return Result(dialogues, turns, _particles(run, exp, output), list(convs), preds, list(aspects), output.label,
                  settings["llm"].get("model", ""), settings, {"totals": totals} if totals else {}, exp.estimate,
                  exp.results, exp.run_dir if keep else None)


REPORT_INPUTS = ("conversations.json", "particle_scores.jsonl", "run_file.json")  # particles.jsonl: optional


def build_report(run_dir: Path) -> Path:
    """report.html + tables from a finished run directory (no LLM). Every input is read through the checking
    readers: a missing, empty, truncated or hand-broken file is one DataError naming it (and its line)."""
    from face.datasets.crsarena import load_conversations
    from face.pipeline.records import read_score_file
    from face.report import diagnostic_report as diagnostics

    if not run_dir.is_dir():
        raise DataError(run_dir, "not a directory (the --out directory of a finished `face evaluate`)")
    for name in REPORT_INPUTS:
        if not (run_dir / name).exists():
            raise DataError(run_dir / name, "missing: not the directory of a finished `face evaluate` run")
    convs = load_conversations(run_dir / "conversations.json", require_labels=False, allow_empty_utterances=False)
    scores = read_score_file(run_dir / "particle_scores.jsonl")
    particles: dict[tuple[str, int], Sequence[Particle]] = {}
    if (run_dir / "particles.jsonl").exists():
        particles = {(t.conv_id, t.turn_ind): t.particles
                     for t in load_released_particles(run_dir / "particles.jsonl")}
    preds = read_run_file(run_dir / "run_file.json")
    settings = diagnostics.read_run_settings(run_dir / "run_settings.json")
    return diagnostics.write_report(run_dir / "report.html", run_dir / "report_tables", run_dir.name, convs,
                                    scores, particles, preds, settings)
