"""Your own conversation logs (chat format or CRSArena-Eval's; ``face.data.chatlogs``), evaluated for
CRSArena-Eval's aspects with their instructions. Human labels are optional: without them a run writes
predictions and the diagnostics report only."""

from __future__ import annotations

from pathlib import Path

from face.data import chatlogs, crsarena
from face.data.schema import Conversation
from face.datasets import Dataset


class ChatLogs(Dataset):
    aspects = crsarena.ASPECTS
    aliases = crsarena.ASPECT_ALIASES
    assistant = "conversational recommendation assistant"
    judged = "conversational recommender systems"

    def __init__(self, name: str = "chat_logs", path: str | None = None, **selection):
        if not path:
            raise ValueError("dataset.path is required: a JSON / JSONL file of conversations")
        super().__init__(name, **selection)
        self.path = Path(path)
        self.title = self.path.name

    @property
    def is_subset(self) -> bool:
        return True  # never the committed results of an experiment

    def load_all(self, data_dir: Path) -> list[Conversation]:
        return chatlogs.load_logs(self.path)
