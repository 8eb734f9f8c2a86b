"""FACE inside other evaluation tools. ``face.integrations.mlflow``: FACE's aspects as MLflow GenAI scorers
(imported on first use: MLflow is not loaded by ``import face``)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["mlflow", "traces"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # (the import binds the submodule here: asked once)
        return importlib.import_module(f"face.integrations.{name}")
    raise AttributeError(f"module 'face.integrations' has no attribute {name!r}")
