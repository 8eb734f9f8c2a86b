"""CRSArena-Eval (467 conversations, 9 CRSs, ReDial / OpenDialKG splits), or the user's own
conversations in its format (``file=``, human labels optional)."""

from __future__ import annotations

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

    def __init__(self, name: str = "crsarena_eval", file: str | None = None, **selection):
        super().__init__(name, **selection)
        self.file = Path(file) if file else None
        if self.file is not None:
            self.title = self.file.name

    @property
    def released_artifacts(self) -> bool:
        return self.file is None  # the authors' particles and scores cover CRSArena-Eval, not the user's file

    @property
    def is_subset(self) -> bool:
        return super().is_subset or self.file is not None

    def files(self) -> list[str]:
        return ([] if self.file else [CRSARENA_EVAL]) + [PUBLISHED_TABLE]

    def load_all(self, data_dir: Path) -> list[Conversation]:
        if self.file is not None:
            return crsarena.load_conversations(self.file, require_labels=False)
        return crsarena.load_conversations(Path(data_dir) / CRSARENA_EVAL)

    def published(self, data_dir: Path) -> pd.DataFrame:
        return load_published_table(Path(data_dir) / PUBLISHED_TABLE)
