"""Score records on their way out of a live run: each one written to ``particle_scores.jsonl`` as it arrives
(with its samples, probability mass, fallback and the particle itself), and kept as compact columns — a few
bytes per score, not a Python object — for the aggregation. A paper-size run (≈ 0.7 M records) holds ≈ 25 MB
of scores, whatever it sent to get them."""

from __future__ import annotations

import contextlib
import json
import math
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from face.data.io import as_id, field, read_jsonl
from face.datasets.face_released import SCORE_COLUMNS
from face.errors import DataError
from face.files import atomic_open
from face.pipeline.scoring import ScoreRecord
from face.predictions import Predictions

# the compact columns (besides the identifying ones of SCORE_COLUMNS)
DETAIL_COLUMNS = ["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score", "n_valid",
                  "n_retried", "n_defaulted", "valid_mass", "fallback"]
NUMBERS = ("turn_ind", "particle_ind", "score", "n_valid", "n_retried", "n_defaulted")  # copied as they are


class ScoreSink(contextlib.ExitStack):
    """``add(record)``: one JSON line in ``path`` and one row of compact columns; ``take()``: those columns.

    The lines are streamed (never held in memory) to a temporary name next to ``path``, renamed onto it when the
    sink closes normally (``os.replace``): ``path`` is always a complete file -- the previous run's, or this one's.
    A run stopped half-way removes its partial file (the rerun rebuilds it from the LLM cache). The sink is the
    context (an ``ExitStack``) that closes the file and renames it, or removes it on an error."""

    def __init__(self, path: Path | None, decomps: dict[tuple[str, int], Any] | None = None):
        super().__init__()
        self.path, self.decomps = path, decomps
        self._f = None if path is None else self.enter_context(atomic_open(path))
        self._empty()

    def add(self, r: ScoreRecord) -> None:
        c = self._cols
        for k, codes in self._codes.items():  # a string's categorical code: the number of strings before it
            c[k].append(codes.setdefault(getattr(r, k), len(codes)))
        for k in NUMBERS:
            c[k].append(getattr(r, k))
        c["valid_mass"].append(math.nan if r.valid_mass is None else r.valid_mass)
        if r.fallback is not None:
            self._fallbacks[self.rows] = r.fallback
        self.rows += 1
        if self._f is not None:  # the record, null for a NaN score, and its particle (None: a whole turn / dialogue)
            row = {**vars(r), "score": None if math.isnan(r.score) else r.score, "particle": None}
            if self.decomps is not None and r.particle_ind >= 0:
                p = self.decomps[(r.conv_id, r.turn_ind)].particles[r.particle_ind]
                row["particle"] = {"dialogue_act": p.dialogue_act, "mention": p.mention,
                                   "user_feedback": p.user_feedback}
            self._f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def take(self) -> pd.DataFrame:
        """The records since the last ``take``: ``DETAIL_COLUMNS`` (aspect, conversation and instruction as
        categoricals); their columns are then let go (the file stays)."""
        codes = self._codes
        df = pd.DataFrame({k: pd.Categorical.from_codes(np.array(col, dtype=np.intc), categories=list(codes[k]))
                           if k in codes  # the others as int64 / float64 columns
                           else np.array(col, dtype=np.float64 if col.typecode == "d" else np.int64)
                           for k, col in self._cols.items()})
        df["fallback"] = np.array([self._fallbacks.get(row) for row in range(len(df))], dtype=object)
        self._empty()
        return df

    def _empty(self) -> None:
        self._codes: dict[str, dict[str, int]] = {k: {} for k in ("aspect", "conv_id", "instruction_id")}
        self._cols: dict[str, array] = {k: array("d" if k in ("score", "valid_mass") else "i")
                                        for k in DETAIL_COLUMNS[:-1]}  # the fallbacks apart
        self._fallbacks: dict[int, str] = {}  # row -> fallback (most rows have none)
        self.rows = 0


class ScoreTally:
    """The counts of a run's score records, added up part by part (``add`` returns the part it was given). The
    valid masses of one aspect are kept (8 bytes a record) and summed when the aspect ends (``end_aspect``), as one
    column, whatever parts it arrived in: the same sum, bit for bit, as the aspect's records in one frame."""

    def __init__(self) -> None:
        self.total = self.missing = self.fallbacks = self.retried = self.defaulted = 0
        self.mass_sum, self.mass_n = 0.0, 0
        self._masses = array("d")

    def add(self, detail: pd.DataFrame) -> pd.DataFrame:
        self.total += len(detail)
        self.missing += int(detail["score"].isna().sum())
        self.fallbacks += int(detail["fallback"].notna().sum())
        self.retried += int(detail["n_retried"].sum())
        self.defaulted += int(detail["n_defaulted"].sum())
        self._masses.extend(detail["valid_mass"].to_numpy(dtype=np.float64))
        return detail

    def end_aspect(self) -> None:
        """The aspect's valid masses summed (NaN left out), as one column."""
        mass = pd.Series(np.array(self._masses, dtype=np.float64)).dropna()
        self.mass_sum += float(mass.sum())
        self.mass_n += len(mass)
        self._masses = array("d")

    def metrics(self, logprobs: bool) -> dict[str, float]:
        if len(self._masses):
            self.end_aspect()
        out: dict[str, float] = {"scores.total": self.total, "scores.without_valid_answer": self.missing,
               "scores.fallbacks": self.fallbacks, "scores.retried_draws": self.retried,
               "scores.defaulted_samples": self.defaulted, "scores.dropped_units": self.missing}
        if logprobs:
            out["scores.mean_valid_mass"] = self.mass_sum / self.mass_n if self.mass_n else 0.0
        return out

class AspectScores:
    """One aspect's score records on their way through: each one to the sink (``add``), aggregated conversation by
    conversation, so memory holds the records of a few conversations, not the aspect's (``dataset.repeat=4``
    peaks where ×1 does).

    ``planned``: how many records each conversation will get. Whenever the records of whole conversations (none
    half-received) add up to ``chunk_rows``, the sink's columns are taken, counted (``tally``) and aggregated
    (``aggregate(scores)``, scores without a valid answer left out); ``result()`` joins the parts. A conversation's
    groups never span two parts, and the parts follow the order the records came in, so the rows, their order, the
    sums (each group's values in the same order) and the dtypes are those of one aggregation of every record at
    once (``tests/test_records_stream.py``). Records of conversations that interleave are simply held until a
    moment none is half-received (at the end, at worst: the memory of one aggregation)."""

    def __init__(self, sink: ScoreSink, tally: ScoreTally, planned: dict[str, int],
                 aggregate: Callable[[pd.DataFrame], Predictions], chunk_rows: int = 20_000):
        self.sink, self.tally, self.aggregate, self.chunk_rows = sink, tally, aggregate, chunk_rows
        self.left = dict(planned)  # conversation -> records still to come
        self.open = 0  # conversations with some of their records received, not all
        self.convs: dict[str, None] = {}  # every conversation seen, in order (the categories of one aggregation)
        self.parts: list[Predictions] = []

    def add(self, r: ScoreRecord) -> None:
        self.sink.add(r)
        conv = r.conv_id
        if conv not in self.convs:
            self.convs[conv] = None
            self.open += 1
        left = self.left.get(conv, -1) - 1
        self.left[conv] = left
        if left == 0:
            self.open -= 1
            if not self.open and self.sink.rows >= self.chunk_rows:
                self._flush()

    def _flush(self) -> None:
        detail = self.tally.add(self.sink.take())
        self.parts.append(self.aggregate(detail[detail["score"].notna()][SCORE_COLUMNS]))

    def result(self) -> Predictions:
        """The aspect's predictions (every record received), as one aggregation of them all would give them."""
        if self.sink.rows or not self.parts:
            self._flush()
        self.tally.end_aspect()
        if len(self.parts) == 1:
            return self.parts[0]
        # the parts share their one aspect's category; the conversations' categories are joined in order of arrival
        convs = pd.CategoricalDtype(list(self.convs))

        def joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
            return pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True).astype({"conv_id": convs})

        return Predictions(joined([p.turn for p in self.parts]), joined([p.dialogue for p in self.parts]))


def per_conversation(units: Sequence[Any], n_instructions: int) -> dict[str, int]:
    """How many score records each conversation gets: its units × the instructions."""
    return {conv: n * n_instructions for conv, n in Counter(u.conv_id for u in units).items()}


# read_score_file(detail=True): what each record says beyond its score (the particle's fields flattened)
DETAIL_FIELDS = ("dialogue_act", "mention", "user_feedback", "estimator", "n_requested", "n_valid", "samples",
                 "distribution", "fallback")


def read_score_file(path: Path, detail: bool = False) -> pd.DataFrame:
    """A finished run's ``particle_scores.jsonl`` (what ``ScoreSink`` wrote) read back for the report: the
    identifying columns and the score (null: no valid answer, NaN). Every line is checked, so a truncated,
    hand-edited or foreign file is one DataError naming the file and the line, not a pandas message.
    ``detail``: also ``DETAIL_FIELDS`` (the particle's act, mention and feedback; the raw samples; None where a
    record has none, e.g. a whole turn scored without particles)."""
    cols: dict[str, list] = {k: [] for k in ("aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id",
                                             "score", *(DETAIL_FIELDS if detail else ()))}
    for lineno, obj in read_jsonl(path):
        rec = f"line {lineno}"
        cols["aspect"].append(field(obj, "aspect", str, path, rec))
        for key, kind in (("conv_id", (str, int)), ("turn_ind", int), ("particle_ind", int),
                          ("instruction_id", (str, int))):  # ids may be numbers in the file: read as strings
            value = field(obj, key, kind, path, rec)
            cols[key].append(value if kind is int else as_id(value, path, rec, key))
        score = field(obj, "score", (float, type(None)), path, rec)
        cols["score"].append(math.nan if score is None else float(score))
        if detail:
            particle = obj.get("particle") or {}
            if not isinstance(particle, dict):
                raise DataError(path, "'particle' must be an object or null", rec)
            for key in DETAIL_FIELDS:
                cols[key].append(particle.get(key) if key in ("dialogue_act", "mention", "user_feedback")
                                 else obj.get(key))
    if not cols["score"]:
        raise DataError(path, "no score records (only blank lines)")
    return pd.DataFrame(cols)
