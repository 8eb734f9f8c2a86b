"""FACE's aspects as MLflow GenAI scorers, for a CRS traced with ``mlflow.trace`` (MLflow 3):

    traces = mlflow.search_traces(locations=[experiment_id], return_type="list")
    mlflow.genai.evaluate(data=traces, scorers=face.integrations.mlflow.scorers(aspects=[...], llm="openai"))

* A dialogue-level aspect (``dialogue_overall``) is a **session-level** scorer: MLflow calls it once per
  conversation, with the session's traces (traces sharing the ``mlflow.trace.session`` metadata, set with
  ``mlflow.update_current_trace(session_id=...)``).
* A turn-level aspect (``relevance``, ``interestingness``, ...) is a **trace-level** scorer: the trace is one
  assistant turn, scored in the context of its whole session (read from the trace's experiment); a trace without a
  session is a conversation of its own (its input may hold the chat history as OpenAI ``messages``).

**From traces to a conversation** (``conversation``): the session's traces in the order they started (root span
start time); each gives the user's message, then the assistant's, read from the root span's inputs and outputs:

* user: a string input; else the last ``user`` message of ``inputs["messages"]`` (OpenAI chat format, text parts
  joined); else the first string among ``input``, ``query``, ``question``, ``message``, ``prompt``, ``user_input``,
  ``request``, ``text``, ``content``; else the input's only string value;
* assistant: a string output; else an OpenAI chat completion's ``choices[0].message.content``; else the first
  string among ``content``, ``output``, ``response``, ``answer``, ``reply``, ``text``, ``message``; else the last
  ``assistant`` message of ``outputs["messages"]``; else the output's only string value.

A trace with neither is a ``DataError`` naming the trace and what it holds; a trace with one of them adds that one
message (two messages of one role in a row are joined with a newline). The system under evaluation is the trace
metadata ``face.system`` where set.

Each scorer returns an ``mlflow.entities.Feedback``: the FACE score (the aspect's scale), as rationale the
lowest-scoring particles (dialogue act, mention, score), the LLM that scored as its source (``LLM_JUDGE``). A
conversation is evaluated once for all the aspects of one ``scorers()`` call (``face.evaluate``, its LLM cache:
re-scoring is free); a turn or conversation without particles has no FACE score: its feedback carries an error.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from mlflow.entities import AssessmentSource, Feedback, Trace
from mlflow.genai.scorers import Scorer
from pydantic import PrivateAttr

from face.errors import ConfigError, DataError
from face.integrations.traces import SESSION_KEY, assistant_text, conversation, is_trace, user_text

LOWEST = 3  # particles named in a rationale


def session_traces(trace: Trace) -> list[Trace]:
    """Every trace of ``trace``'s session, from the tracking store (the trace alone when it has no session)."""
    import mlflow

    if not is_trace(trace):
        raise DataError("MLflow trace", f"a {type(trace).__name__} is not an MLflow trace (mlflow.entities.Trace)")
    sid = (trace.info.trace_metadata or {}).get(SESSION_KEY)
    if not sid or not trace.info.experiment_id:
        return [trace]
    quoted = sid.replace("'", "\\'")
    found = mlflow.search_traces(locations=[trace.info.experiment_id], return_type="list",
                                 filter_string=f"metadata.`{SESSION_KEY}` = '{quoted}'")
    return found if any(t.info.trace_id == trace.info.trace_id for t in found) else [*found, trace]


# ---------------------------------------------------------------- evaluating, once per conversation
class Engine:
    """What the scorers of one ``scorers()`` call share: the settings, and each conversation's ``face.Result``
    (a conversation is evaluated once, for all their aspects, then read by every scorer)."""

    def __init__(self, aspects: Sequence[str], llm: str, settings: dict):
        self.aspects, self.llm, self.settings = list(aspects), llm, dict(settings)
        self._results: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def result(self, traces: Sequence[Trace]) -> tuple[Any, str, dict[str, int]]:
        """(the ``face.Result`` of the traces' conversation, its conversation id, each trace's turn index)."""
        from face.api import evaluate

        conv, turn_of = conversation(traces)
        key = (conv["id"], tuple(sorted(t.info.trace_id for t in traces)))
        with self._lock:
            if key not in self._results:
                self._results[key] = evaluate([conv], aspects=self.aspects, llm=self.llm, quiet=True,
                                              **self.settings)
        return self._results[key], str(conv["id"]), turn_of


def _feedback(name: str, result: Any, aspect: str, conv_id: str, turn_ind: int | None, where: str) -> Feedback:
    spec = next(a for a in result.aspects if a.name == aspect)
    source = AssessmentSource(source_type="LLM_JUDGE", source_id=result.llm or "unknown")
    meta = {"face.aspect": aspect, "face.level": spec.level, "face.conv_id": conv_id, "face.label": result.label[:500]}
    if turn_ind is None:
        rows = result.dialogues[result.dialogues["conv_id"] == conv_id]
    else:
        rows = result.turns[(result.turns["conv_id"] == conv_id) & (result.turns["turn_ind"] == turn_ind)]
        meta["face.turn_ind"] = str(turn_ind)
    value = float(rows[aspect].iloc[0]) if len(rows) else math.nan
    if math.isnan(value):
        return Feedback(name=name, error=f"FACE has no {aspect} score for {where}: no conversation particle was found "
                        "(as in the authors' code, such a turn or conversation is not scored)", source=source,
                        metadata=meta)
    low = result.lowest_particles(conv_id, aspect, turn_ind, k=LOWEST)
    numbers = {t: n for n, t in enumerate(sorted(result.turns.loc[result.turns["conv_id"] == conv_id, "turn_ind"]),
                                          start=1)}
    n_particles = result.particles[(result.particles["conv_id"] == conv_id) & (result.particles["aspect"] == aspect)
                                   & (result.particles["particle_ind"] >= 0)
                                   & ((result.particles["turn_ind"] == turn_ind) if turn_ind is not None else True)]
    count = n_particles[["turn_ind", "particle_ind"]].drop_duplicates().shape[0]
    lines = [f"{i}. assistant turn {numbers.get(r.turn_ind, '?')}, {r.dialogue_act}: \u201c{r.mention}\u201d "
             f"\u2192 {r.score:.2f}" for i, r in enumerate(low.itertuples(), start=1)]
    rationale = (f"FACE {aspect} of {where}: {value:.2f} on a {spec.low:g}\u2013{spec.high:g} scale, the mean over "
                 f"{count} particle(s) \u00d7 {n_particles['instruction_id'].nunique()} instruction(s). Lowest-scoring "
                 "particles (mean over instructions):\n" + "\n".join(lines))
    return Feedback(name=name, value=value, rationale=rationale, source=source, metadata=meta)


class FaceScorer(Scorer):
    """A FACE aspect as an MLflow scorer (built by ``scorers``)."""

    aspect: str
    timeout: int | float | None = 0  # the run has its own LLM timeouts and retries: no extra watchdog thread
    _engine: Engine | None = PrivateAttr(default=None)

    def engine(self) -> Engine:
        if self._engine is None:
            raise ConfigError(f"scorer {self.name}: build FACE's scorers with face.integrations.mlflow.scorers(...)")
        return self._engine


class FaceSessionScorer(FaceScorer):
    """A dialogue-level FACE aspect: one Feedback per conversation (MLflow session)."""

    @property
    def is_session_level_scorer(self) -> bool:
        return True

    # mlflow passes a scorer only the parameters it names (inspect.signature): narrower than Scorer's on purpose
    def __call__(self, *, session: list[Trace]) -> Feedback:  # type: ignore[override]
        result, conv_id, _ = self.engine().result(session)
        return _feedback(self.name, result, self.aspect, conv_id, None, "the conversation")


class FaceTurnScorer(FaceScorer):
    """A turn-level FACE aspect: one Feedback per trace (an assistant turn, scored in its session's context)."""

    def __call__(self, *, trace: Trace) -> Feedback:  # type: ignore[override]  # (the same: by name)
        result, conv_id, turn_of = self.engine().result(session_traces(trace))
        turn = turn_of.get(trace.info.trace_id)
        if turn is None:
            raise DataError(f"MLflow trace {trace.info.trace_id}", "no assistant reply to score at turn level")
        return _feedback(self.name, result, self.aspect, conv_id, turn, "this assistant turn")


def scorers(aspects: Sequence[str] | str | None = None, llm: str = "local", *, prefix: str = "face_",
            **settings: Any) -> list[FaceScorer]:
    """One MLflow scorer per aspect, named ``<prefix><aspect>``: session-level for dialogue-level aspects,
    trace-level for turn-level ones. ``aspects`` (None: all seven of CRSArena-Eval), ``llm`` and ``settings`` are
    ``face.evaluate``'s, checked here (``ConfigError``, a missing API key too) before MLflow calls anything; ``quiet``
    is implied (passing ``quiet`` or ``out`` is a ConfigError)."""
    from face.api import check_settings

    if "quiet" in settings or "out" in settings:
        raise ConfigError("scorers(): quiet and out are set by the scorers (each conversation is evaluated quietly, "
                          "into a temporary directory)")
    if not isinstance(prefix, str):
        raise ConfigError(f"scorers(): prefix must be a string (each scorer is named <prefix><aspect>), got {prefix!r}")
    specs = check_settings(aspects, llm, **settings)
    engine = Engine([a.name for a in specs], llm, settings)
    out: list[FaceScorer] = [(FaceSessionScorer if a.level == "dialogue" else FaceTurnScorer)(
        name=f"{prefix}{a.name}", aspect=a.name) for a in specs]
    for s in out:
        s._engine = engine
    return out


__all__ = ["Engine", "FaceScorer", "FaceSessionScorer", "FaceTurnScorer", "assistant_text", "conversation",
           "scorers", "session_traces", "user_text"]
