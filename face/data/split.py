"""Conversation-level folds, stratified by system, reproducible from a seed.

Every conversation of a system is shuffled with the seed and dealt round-robin to ``folds`` folds, so each
fold holds about the same share of every system. The held-out fold is the test set; of the remaining
conversations a ``dev_fraction`` (again per system) is dev, the rest train. A conversation (and so every
one of its turns) is on exactly one side.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from face.data.schema import Conversation


@dataclass(frozen=True)
class Split:
    train: tuple[str, ...]
    dev: tuple[str, ...]
    test: tuple[str, ...]


def split_conversations(convs: Sequence[Conversation], folds: int = 2, fold: int = 0, dev_fraction: float = 0.25,
                        seed: int = 0) -> Split:
    """``fold`` in 0..folds − 1 and ``dev_fraction`` in [0, 1): their settings hold them there."""
    assign: dict[str, int] = {}  # conv_id -> fold, stratified by system (whatever the order of the conversations)
    offset = 0
    for system, ids in _by_system(convs).items():
        rng = np.random.default_rng([seed, _stable(system)])
        for j, i in enumerate(rng.permutation(len(ids))):
            assign[ids[i]] = (j + offset) % folds
        offset += len(ids)  # the next system starts where this one stopped, so fold sizes stay balanced
    test = sorted(c for c, f in assign.items() if f == fold)
    rest = [c for c in convs if assign[c.conv_id] != fold]
    dev: set[str] = set()
    for system, ids in _by_system(rest).items():
        rng = np.random.default_rng([seed, _stable(system), 1])
        k = int(round(dev_fraction * len(ids)))  # 0: no dev
        dev |= {ids[i] for i in rng.permutation(len(ids))[:k]}
    train = sorted(c.conv_id for c in rest if c.conv_id not in dev)
    return Split(tuple(train), tuple(sorted(dev)), tuple(test))


def _by_system(convs: Sequence[Conversation]) -> dict[str, list[str]]:
    """system -> its conversation ids, both sorted."""
    out: dict[str, list[str]] = defaultdict(list)
    for c in convs:
        out[c.system].append(c.conv_id)
    return {system: sorted(ids) for system, ids in sorted(out.items())}


def _stable(text: str) -> int:
    """A process-independent integer for a string (Python's hash() is salted per process)."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)
