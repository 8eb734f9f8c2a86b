"""Datasets: conversations, the aspects their human labels were collected for, splits, systems,
published reference numbers. Built from config (``conf/dataset/*.yaml``, ``_target_``).

A dataset subclass says where its files are (``files``), how to read them (``load_all``) and what the
published numbers are (``published``); selection (``limit``, ``systems``, ``splits``) is shared here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from pydantic import Field

from face.aspects import Aspect
from face.data.schema import Conversation
from face.errors import closest_first
from face.settings import settings

PUBLISHED_COLUMNS = ["method", "split", "aspect", "coefficient", "value"]


@settings("dataset")
class Selection:
    """The settings every dataset has (conf/dataset/*.yaml); a dataset's settings class extends it with its own
    and names its conf file (the defaults)."""

    name: str
    limit: int | None = Field(ge=1)  # the first N conversations (after the filters below)
    systems: list[str] | None  # a system name or a CRS id each
    splits: list[str] | None
    download: bool  # fetch missing files
    instructions: str  # default instruction set of the live method (read by conf/method)


class Dataset:
    title: str = "conversations"  # shown in every caption
    splits_all: tuple[str, ...] = ("all",)  # the dataset's own splits (meta-evaluated separately, then pooled)
    aspects: Mapping[str, Aspect] = {}
    aliases: Mapping[str, str] = {}  # legacy aspect names -> canonical
    # one evaluated response per item, items grouped by dialogue context (USR): no dialogue level, and the bootstrap
    # resamples contexts
    response_level: bool = False
    # wording of the prompts that mention the domain
    assistant: str = "dialogue assistant"  # "a <assistant>" in the decomposition prompt
    judged: str = "dialogue systems"  # "an expert judge of <judged>" in the scoring prompts
    released_artifacts: bool = False  # the FACE authors released particles, instructions and scores for it

    def __init__(self, name: str | Selection, **selection: Any):
        """The dataset's settings (a Selection, or one extended with the dataset's own keys), or its name and the
        settings every dataset has (conf/dataset/<name>.yaml states them)."""
        s = name if isinstance(name, Selection) else Selection(name=name, **selection)
        unknown = sorted(set(s.splits or ()) - set(self.splits_all))
        if unknown:
            raise ValueError(f"dataset {s.name}: unknown split(s) {unknown}; this dataset has {list(self.splits_all)}")
        self.name = s.name
        self.limit = s.limit
        self.systems = s.systems or None
        self.splits = s.splits or None
        self.download = s.download
        self.is_subset = bool(self.limit or self.systems or self.splits)  # not the whole dataset (a subclass adds)

    # ---- what a subclass provides -------------------------------------------------
    def files(self) -> list[str]:
        """Manifest names (``face.data.manifest``) to fetch and verify before loading."""
        return []

    def load_all(self, data_dir: Path) -> list[Conversation]:
        raise NotImplementedError

    def published(self, data_dir: Path) -> pd.DataFrame:
        """Published reference correlations (``PUBLISHED_COLUMNS``); empty when there are none."""
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)

    # ---- shared -------------------------------------------------------------------
    def select(self, convs: Sequence[Conversation]) -> list[Conversation]:
        """By system (exact id, or the part before the first ``_``), by split, then the first ``limit``."""
        out = list(convs)
        if self.systems:
            out = [c for c in out if c.system in self.systems or c.system.split("_")[0] in self.systems]
        if self.splits:
            out = [c for c in out if c.split in self.splits]
        return out[: self.limit]

    def eval_splits(self) -> list[str]:
        """Splits to report: each of the dataset's splits, then ``all`` (pooled) when there are several."""
        return list(self.splits_all) + (["all"] if len(self.splits_all) > 1 else [])

    def resolve_aspects(self, names: Sequence[str] | None) -> list[Aspect]:
        """The aspects to evaluate: ``names`` (an alias read as its canonical name; a ValueError naming every unknown
        one, the valid ones closest first), or all the dataset's aspects when ``names`` is null. An empty list names
        none: refused (it would otherwise silently mean all of them)."""
        if isinstance(names, str):  # aspects=relevance: one name, not its letters
            names = [names]
        if names is not None and len(names) == 0:
            raise ValueError(f"aspects=[] names no aspect: name at least one of {', '.join(self.aspects)} "
                             "(or aspects=null for the dataset's defaults)")
        names = list(names) if names is not None else list(self.aspects)
        canon = [self.aliases.get(n, n) for n in names]
        unknown = [n for n, c in zip(names, canon) if c not in self.aspects]
        if unknown:
            raise ValueError(f"dataset {self.name} has no aspect {', '.join(map(repr, unknown))}; its aspects, closest "
                             f"first: {', '.join(closest_first(unknown, list(self.aspects)))}")
        out = [self.aspects[c] for c in canon]
        dup = sorted({a.name for a in out if out.count(a) > 1})
        if dup:  # relevance twice, or dialogue_overall and its alias: one set of scores under one name
            raise ValueError(f"aspects: {', '.join(dup)} named twice")
        return out
