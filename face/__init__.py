"""face: fine-grained, aspect-based, reference-free evaluation of conversational recommender systems.

    import face
    result = face.evaluate("logs.jsonl", aspects=["relevance", "dialogue_overall"], llm="openai")
    result.dialogues                    # one row per conversation, a column per dialogue-level aspect
    face.meta_evaluate(result, labels)  # correlations with human labels
    face.estimate("logs.jsonl", llm="openai")   # calls, tokens and cost, before anything is sent
    face.compare("runs/v1", "runs/v2")  # is v2 better? per aspect: difference, CI, p (Holm), verdict

MLflow: ``face.integrations.mlflow.scorers(aspects=[...], llm=...)``. Reference: docs/api.md.
The names below are imported on first use: ``import face`` stays quick.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_HOMES = {"evaluate": "face.api", "estimate": "face.api", "meta_evaluate": "face.api", "Result": "face.api",
          "ConfigError": "face.errors", "DataError": "face.errors", "BudgetExceeded": "face.llm",
          "LLMCallError": "face.llm", "LLMRequestRefused": "face.llm",
          "compare": "face.comparison.engine", "Comparison": "face.comparison.comparison",
          "compare_sequential": "face.api.sequential"}

__all__ = sorted([*_HOMES, "__version__", "integrations"])


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name == "integrations":
        value = importlib.import_module("face.integrations")
    else:
        raise AttributeError(f"module 'face' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
