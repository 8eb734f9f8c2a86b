"""FACE as a Python library: ``face.evaluate``, ``face.estimate``, ``face.meta_evaluate`` (exported by ``face``).

The same engine as ``face evaluate`` and ``scripts/run.py experiment=crsarena_main``: the conversations become the
``chat_logs`` dataset (or a dataset is named: ``"crsarena_eval"``), the arguments and settings become one run request
for the runner (``face.runner.run``: composed into the same Hydra configuration, no Hydra on the caller's side),
checked by the same code before anything is sent or written, every LLM answer goes through the same cache
(``data/cache/llm``: a rerun is free) and a budget (``llm.max_cost_usd``, ``llm.max_calls``) stops the run the same
way. A stop is an exception, never an exit: ``ConfigError`` / ``DataError`` (a bad argument, setting or input, a
missing API key: nothing sent), ``BudgetExceeded``, ``LLMCallError`` / ``LLMRequestRefused`` (an LLM request
failed), ``KeyboardInterrupt``.

Settings are the configuration's own names, given as keyword arguments: a config group by its name
(``run_size="tiny"``, ``method="face_released"``), any key by its dotted name (``**{"method.scoring.n": 3}``) or as
a nested dict (``method={"scoring": {"n": 3}}`` is ``method.scoring.n=3``). See docs/api.md.

    inputs.py     conversations -> the run's input (a file, in-memory conversations, a dataset by name)
    overrides.py  arguments and settings -> the run's config group choices and settings (own keys, hydra.* refused)
    result.py     Result, built from the run's typed result; build_report (face report DIR)
    evaluate.py   evaluate, estimate, check_settings: one run request each, through face.runner
    meta.py       meta_evaluate
"""

from __future__ import annotations

from face.api.evaluate import check_settings, estimate, evaluate, evaluation
from face.api.meta import meta_evaluate
from face.api.result import Result

__all__ = ["Result", "check_settings", "estimate", "evaluate", "evaluation", "meta_evaluate"]
