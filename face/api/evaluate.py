"""``face.evaluate`` and ``face.estimate``: their arguments become one run request (``face.runner.RunRequest``) for
the runner, the same one ``face evaluate`` sends (``evaluation``); the ``Result`` is built from what the run returns.

Called inside a running event loop (Jupyter), the run goes to a worker thread and the call blocks until it ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from face.api.inputs import Conversations, Source, source_of
from face.api.overrides import check_arguments, run_settings, split_settings
from face.api.result import Result, build_report, result_of

if TYPE_CHECKING:
    import pandas as pd

    from face.runner import RunResult

# one run at a time per process: Hydra's composition is process-wide state (GlobalHydra), and so are the log redaction
# and the standard streams `quiet` redirects; a run itself sends its LLM requests concurrently
_RUN_LOCK = threading.RLock()


def evaluation(conversations: Conversations, aspects: Any, llm: Any, out: Any, *, overwrite: Any = False,
               limit: Any = None, mlflow: Any = False, settings: Mapping[str, Any] | None = None,
               overrides: Sequence[str] = (), entry: str = "api", **request: Any) -> tuple[RunResult, Result | None]:
    """FACE on ``conversations`` through the runner, as ``face.evaluate`` and ``face evaluate`` (``entry="cli"``:
    its ``--set`` ``overrides``, and its argument names in refusals) run it: the input checked, the run, and the
    Result once the run sent its requests (with ``out``: its conversations and report written there too).
    ``request``: the RunRequest's ``estimate_only`` / ``confirm``."""
    from face.runner import RunRequest, run
    from face.runner.compose import composed

    names = check_arguments(aspects, llm, out, limit, entry, overwrite=overwrite, mlflow=mlflow)
    choices, keys = split_settings(settings or {}, overrides, entry)
    with tempfile.TemporaryDirectory(prefix="face-", ignore_cleanup_errors=True) as tmp:
        source, _ = source_of(conversations, Path(tmp))  # bad conversations: one DataError, before anything is written
        target = Path(os.path.abspath(os.fspath(out))) if out is not None else Path(tmp) / "run"
        kept: list[Result] = []

        def finish(done: RunResult, summary) -> None:
            """The last step of the run, in its still-claimed directory: the Result; with ``out``, its conversations
            (``face report DIR`` reads them back) and its report, named in the summary block."""
            from face.datasets.crsarena import write_conversations
            from face.tracking import log_last_files

            result = result_of(done, out is not None)
            kept.append(result)
            if out is not None:
                write_conversations(result.conversations, target / "conversations.json")
                path = None
                if (target / "particle_scores.jsonl").exists():  # the live method's: face report DIR rebuilds the same
                    path = build_report(target)
                elif len(result.particles):  # scores the method kept in memory (face_released)
                    path = result.report(target / "report.html", tables=True)
                # with --mlflow: what face compare mlflow:<id> reads beside the run file, the report and its tables
                log_last_files([target / "run_settings.json", target / "conversations.json"], "run")
                log_last_files([path] if path is not None else [])
                log_last_files([target / "report_tables"], "report_tables")
                if path is not None and summary is not None:
                    summary.extra.append(("Report", str(path)))
            elif summary is not None:  # a temporary directory, removed: the Result holds everything
                summary.results = summary.run_dir = None
                summary.extra.append(("Results", "the returned face.Result (out=None: no files kept)"))

        with composed(*run_settings(source, names, llm, target, limit, mlflow, choices, keys)) as cfg:
            done = run(cfg, RunRequest(out=target, out_name="--out" if entry == "cli" else "out", overwrite=overwrite,
                                       finish=finish, **request))
        return done, (kept[0] if kept else None)


def evaluate(conversations: Conversations, aspects: Sequence[str] | str | None = None, llm: str = "local", *,
             out: str | os.PathLike | None = None, overwrite: bool = False, limit: int | None = None,
             mlflow: bool = False, quiet: bool = False, **settings: Any) -> Result:
    """Evaluate conversations with FACE: particles, their scores per aspect and instruction, turn and dialogue scores.

    Args:
        conversations: a JSON / JSON Lines file (chat format ``{"id", "system", "messages": [{"role", "content"}]}``
            or CRSArena-Eval's), a list of chat-format dicts (or bare message lists, or ``Conversation`` objects),
            a DataFrame of messages (one row each: ``conv_id``, ``role``, ``content``, optional ``system``), or the
            name of a dataset of ``conf/dataset/`` (``"crsarena_eval"``: its conversations and human labels, fetched
            into the data directory).
        aspects: CRSArena-Eval aspect names (``relevance``, ``interestingness``, ``understanding``,
            ``task_completion``, ``interest_arousal``, ``efficiency``, ``dialogue_overall``) and those of
            ``dataset.aspects_file`` (aspects of your own: docs/extending.md); None: CRSArena-Eval's seven.
        llm: a config of ``conf/llm/``: ``local`` (embedded, no key; no judging signal), ``openai``,
            ``openai_compatible``, ``replay``, ``scripted`` (a fake server for tests), or your own.
        out: keep the run's files there (run file, particles, per-particle scores, cost estimate, usage, report);
            None: a temporary directory, removed once the result is read. Rerunning the same conversations and
            settings into ``out`` resumes; another run's results there are refused unless ``overwrite``.
        overwrite: True or False (anything else is refused).
        limit: only the first ``limit`` conversations.
        mlflow: also log the run to MLflow (``tracking=mlflow``: ``sqlite:///mlflow.db`` of the project).
        quiet: print nothing (the cost estimate, tables and the run summary); warnings still go to stderr.
        **settings: any setting of the configuration (docs/api.md, "Settings"), e.g. ``run_size="tiny"``,
            ``**{"method.scoring.n": 3, "llm.max_cost_usd": 5}``.

    Returns: a ``Result``. Raises ``ConfigError`` / ``DataError`` before anything is sent or written (a missing API
    key among them), and ``BudgetExceeded``, ``LLMCallError``, ``LLMRequestRefused`` when the run stops. Calls from
    several threads run one at a time."""
    _, result = _api(quiet, conversations, aspects, llm, out, overwrite=overwrite, limit=limit, mlflow=mlflow,
                     settings=settings)
    assert result is not None  # a run with neither confirmation nor estimate_only sends: its Result is kept
    return result


def estimate(conversations: Conversations, aspects: Sequence[str] | str | None = None, llm: str = "local", *,
             limit: int | None = None, quiet: bool = False, **settings: Any) -> pd.DataFrame:
    """What ``face.evaluate`` with the same arguments would send, and cost: one row per stage (decomposition, each
    aspect's scoring) and a ``total`` row, with ``requests``, ``samples``, ``http_requests``, ``input_tokens``,
    ``output_tokens``, ``cost_usd`` (from ``llm.price_*_per_mtok``; the units and names of ``llm_usage.json``) and,
    for a scoring stage whose particles are not known yet, the ``particles_per_turn`` it assumed; None for a method
    that calls no LLM (``method="face_released"``). Sends nothing, starts no server, needs no API key; answers already
    cached are still counted. The table is printed as the command prints it, unless ``quiet``."""
    done, _ = _api(quiet, conversations, aspects, llm, None, limit=limit, settings=settings, estimate_only=True)
    return done.estimate


def check_settings(aspects: Sequence[str] | str | None = None, llm: str = "local", **settings: Any) -> list:
    """The aspects (``face.aspects.Aspect``) that ``face.evaluate(..., aspects, llm, **settings)`` would evaluate,
    after the checks it makes before anything runs (settings, LLM settings, credentials); ``ConfigError`` if one
    fails. Sends nothing, writes nothing: for a caller that builds now and evaluates later (the MLflow scorers)."""
    from face.runner import check
    from face.runner.compose import composed

    names = check_arguments(aspects, llm, None, None)
    choices, keys = split_settings(settings)
    with _RUN_LOCK, tempfile.TemporaryDirectory(prefix="face-") as tmp:
        source = Source(Path(tmp) / "conversations.json")
        with composed(*run_settings(source, names, llm, Path(tmp) / "run", None, False, choices, keys)) as cfg:
            return check(cfg, load=False).aspects


def _api(quiet: Any, *args: Any, **kwargs: Any) -> tuple[RunResult, Result | None]:
    """``evaluation`` as the API calls it: one run at a time per process, printing nothing when ``quiet``; here, or in
    a worker thread when this thread runs an event loop (Jupyter, an async app: Ctrl-C stops the worker's LLM client
    too, face.llm.client.run_off_loop)."""
    from face.llm.client import run_off_loop

    check_arguments(None, "local", None, None, quiet=quiet)
    return run_off_loop(_locked, quiet, *args, **kwargs)


def _locked(quiet: bool, *args: Any, **kwargs: Any) -> tuple[RunResult, Result | None]:
    with _RUN_LOCK, (contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()):
        return evaluation(*args, **kwargs)
