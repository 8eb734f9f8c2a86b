"""The run's own settings, typed (conf/config.yaml): ``seed``, ``aspects``, ``metaeval.*``, ``checks.*``,
``report.*``. Nothing here knows a method's, a dataset's or the LLM's keys: each of those checks its own when it is
built (``face.settings``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from face.settings import Number, nested, settings


@settings("metaeval", conf="config.yaml:metaeval")
class MetaevalSettings:
    splits: list[str] | None  # null: each of the dataset's splits, then all (pooled)
    n_boot: int = Field(ge=0)  # bootstrap resamples of conversations (0: no intervals)
    confidence: Number = Field(gt=0, lt=1)


@settings("checks")
class ChecksSettings:
    # utterances longer than this (characters, ~4 per token) are reported before anything is sent; set
    # +checks.max_utterance_chars=N (or null to switch the check off)
    max_utterance_chars: int | None = Field(default=20_000, ge=1)


@settings("report", conf="config.yaml:report")
class ReportSettings:
    out_dir: str | None  # null: results/<task_name> on the full data, <run dir>/results otherwise


@settings("", conf="config.yaml")
class RunSettings:
    seed: int
    aspects: str | list[str] | None  # null: the dataset's; a name or a list of names
    metaeval: Annotated[MetaevalSettings, nested(MetaevalSettings)]
    checks: Annotated[ChecksSettings, nested(ChecksSettings)] = dataclasses.field(default_factory=ChecksSettings)
    report: Annotated[ReportSettings, nested(ReportSettings)]

    @classmethod
    def of(cls, cfg: DictConfig) -> RunSettings:
        """The run's settings of a composed configuration (ConfigError naming the key if one is wrong)."""
        keys = [f.name for f in dataclasses.fields(cls)]
        given: dict[str, Any] = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k])
                                 else cfg[k] for k in keys if k in cfg}
        return cls(**given)
