"""Methods turn conversations into predictions. A method is an object built from config
(``conf/method/*.yaml`` names its class with ``_target_``) with two calls:

    method.required_files(dataset, aspects) -> manifest names to fetch before anything runs
    method.predict(inputs) -> MethodOutput

A new method (a baseline, an optimized variant) is one module plus one config; nothing else changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import pandas as pd

from face.aspects import Aspect
from face.console import RunSummary
from face.data.schema import Conversation
from face.errors import ConfigError, import_class
from face.llm.config import LLMConfig
from face.predictions import Predictions


@dataclass
class MethodOutput:
    predictions: Predictions
    particle_scores: pd.DataFrame | None = None  # long table, SCORE_COLUMNS (+ method-specific columns)
    label: str = ""  # what produced the numbers: LLM, samples, data — printed on every table and figure
    artifacts: list[Path] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    dry_run: bool = False  # nothing was sent; predictions are empty


@dataclass
class Inputs:
    """Everything a method may read: the data it predicts for and where it may write."""

    dataset: Any  # face.datasets.Dataset
    convs: list[Conversation]
    aspects: list[Aspect]
    data_dir: Path
    run_dir: Path  # the job's own directory (run files, per-particle files)
    llm: LLMConfig | None = None  # the LLM settings (conf/llm), typed once by the experiment; None: no LLM
    tracker: Any = None  # face.tracking.Tracker or None
    summary: RunSummary = field(default_factory=RunSummary)  # the run's console: each LLM job's estimate and usage

    @property
    def levels(self) -> dict[str, str]:
        return {a.name: a.level for a in self.aspects}

    def register_instructions(self, source: str, of: Callable[[Aspect], Sequence[Any]],
                              wording: Callable[[Aspect], str] = lambda a: "") -> None:
        """Each aspect's instructions ``of(aspect)`` in the MLflow Prompt Registry, named by ``source`` and
        ``wording(aspect)`` (face.tracking), when the run is tracked."""
        for a in self.aspects if self.tracker is not None else ():
            self.tracker.register_instructions(a.name, of(a), source, wording(a))

    def needs_llm(self, who: str) -> LLMConfig:
        """The LLM settings; a ConfigError naming ``who`` when the configuration has no llm group."""
        if self.llm is None:
            raise ConfigError(f"{who} calls an LLM: the configuration needs an llm group")
        return self.llm


class Method(Protocol):
    name: str

    def required_files(self, dataset: Any, aspects: Sequence[Aspect]) -> list[str]: ...

    def predict(self, inputs: Inputs) -> MethodOutput: ...


def escape_interpolation(value: str) -> str:
    """``value`` as an OmegaConf string that reads back as exactly ``value`` (``\\${`` is a literal ``${``)."""
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)


def build(node: Any) -> Any:
    """The object a config node names with ``_target_`` (methods, datasets), called with the node's other keys,
    resolved (a value read as a literal ``${`` stays one: nothing is resolved twice). The class is imported as every
    ``_target_``-like setting is (``face.errors.import_class``); a bad parameter raises the class's own ValueError,
    prefixed with the node's name, a typed setting's ConfigError as it is (its message names the dotted key)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    kwargs = dict(node or {})
    if "_target_" not in kwargs:
        raise ValueError("the config node has no _target_ naming the class to build")
    target = kwargs.pop("_target_")
    cls = import_class(target, "_target_")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ValueError(f"{kwargs.get('name', target)}: {e}") from e
