"""CRSArena-Eval (467 conversations, 9 CRSs, ReDial / OpenDialKG splits), or the user's own
conversations in its format (``file=``, human labels optional)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from face.data import CRSARENA_EVAL, PUBLISHED_TABLE, crsarena
from face.data.released import load_published_table
from face.data.schema import Conversation
from face.datasets import Dataset


class CRSArenaEval(Dataset):
    title = "CRSArena-Eval"
    splits_all = crsarena.SPLITS
    aspects = crsarena.ASPECTS
    aliases = crsarena.ASPECT_ALIASES
    assistant = "movie-recommendation assistant"
    judged = "conversational recommender systems"

    def __init__(self, name: str = "crsarena_eval", file: str | None = None, repeat: int = 1, **selection):
        super().__init__(name, **selection)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise ValueError(f"dataset.repeat must be a positive integer, got {repeat!r}")
        self.file = Path(file) if file else None
        self.repeat = repeat
        if self.file is not None:
            self.title = self.file.name
        if repeat > 1:
            self.title = f"{self.title} ×{repeat}"

    @property
    def released_artifacts(self) -> bool:
        return self.file is None  # the authors' particles and scores cover CRSArena-Eval, not the user's file

    @property
    def is_subset(self) -> bool:
        return super().is_subset or self.file is not None or self.repeat > 1

    def files(self) -> list[str]:
        return ([] if self.file else [CRSARENA_EVAL]) + [PUBLISHED_TABLE]

    def load_all(self, data_dir: Path) -> list[Conversation]:
        if self.file is not None:
            convs = crsarena.load_conversations(self.file, require_labels=False)
        else:
            convs = crsarena.load_conversations(Path(data_dir) / CRSARENA_EVAL)
        return convs + [copy_of(c, k) for k in range(2, self.repeat + 1) for c in convs]

    def published(self, data_dir: Path) -> pd.DataFrame:
        return load_published_table(Path(data_dir) / PUBLISHED_TABLE)


def copy_of(conv: Conversation, k: int) -> Conversation:
    """Copy k of a conversation (``dataset.repeat``, for scale benchmarks): id ``<id>~k``, every utterance followed by
    `` (copy k)`` so that none of its prompts is another's (the replay judge reads a copy as its original), the
    same labels, system and split."""
    turns = tuple(replace(t, utterance=f"{t.utterance} (copy {k})") for t in conv.turns)
    return replace(conv, conv_id=f"{conv.conv_id}~{k}", turns=turns)
