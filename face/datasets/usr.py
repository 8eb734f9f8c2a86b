"""USR's human judgements of Topical-Chat and PersonaChat responses: turn level (one evaluated
response per item) for each of the six qualities; the system is the response generator."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from face.data import USR_FILES, usr
from face.data.schema import Conversation
from face.datasets import Dataset

TITLES = {"topical_chat": "USR Topical-Chat", "persona_chat": "USR PersonaChat"}


class USR(Dataset):
    aspects = usr.ASPECTS
    assistant = "open-domain chit-chat assistant"
    judged = "open-domain dialogue systems"

    def __init__(self, name: str, corpus: str, exclude_ground_truth: bool = True, **selection):
        if corpus not in USR_FILES:
            raise ValueError(f"dataset.corpus must be one of {list(USR_FILES)}, got {corpus!r}")
        super().__init__(name, **selection)
        self.corpus = corpus
        self.title = TITLES[corpus]
        self.exclude_ground_truth = exclude_ground_truth

    def files(self) -> list[str]:
        return [USR_FILES[self.corpus]]

    def load_all(self, data_dir: Path) -> list[Conversation]:
        contexts = usr.load_usr(Path(data_dir) / USR_FILES[self.corpus])
        return usr.to_conversations(contexts, self.exclude_ground_truth)

    def published(self, data_dir: Path) -> pd.DataFrame:
        """USR's published turn-level correlations (its Tables 3-6) and the FACE paper's transfer headline,
        with their citations (``face.datasets.published``); the data files are not needed."""
        from face.datasets.published import usr_published

        return usr_published(self.corpus)
