"""A toy dataset, a toy method, and a toy instruction source and scorer for live FACE, registered only by the
test-local configs in tests/toy_conf/: they prove that adding a dataset, a method or a part of FACE needs a new
module and a config, and no edit elsewhere."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import ClassVar

import pandas as pd

from face.aspects import Aspect, aspect_table
from face.data.schema import Conversation, Instruction, Turn
from face.datasets import Dataset
from face.methods import Inputs, MethodOutput
from face.pipeline.parts import InstructionSource
from face.pipeline.scoring import SamplingEstimator
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions

REPLIES = ["Yes.", "Try Heat.", "Maybe Alien, it is a classic.", "I would suggest Solaris, a slow and thoughtful film.",
           "Sure.", "Have you seen Blade Runner? It is long, but many people love its atmosphere and music."]


def toy_conversations() -> list[Conversation]:
    """12 conversations by 3 systems in 2 splits; labels: brevity 2/1/0 by reply length, overall = 3 - mean."""
    out = []
    for i in range(12):
        replies = [REPLIES[(i + k) % len(REPLIES)] for k in range(2)]
        turns, brevity = [], []
        for k, reply in enumerate(replies):
            b = 2 if len(reply.split()) <= 2 else 1 if len(reply.split()) <= 6 else 0
            brevity.append(b)
            turns += [Turn(2 * k, "USER", "Any film?"), Turn(2 * k + 1, "ASST", reply, {"brevity": b})]
        out.append(Conversation(f"toy{i}", tuple(turns), {"overall": 3 - sum(brevity) / 2},
                                system=f"sys{i % 3}", split="a" if i % 2 else "b"))
    return out


class ToyDataset(Dataset):
    title = "Toy"
    splits_all = ("a", "b")
    aspects = aspect_table([Aspect("brevity", "turn", (0, 1, 2), "Is the reply short?"),
                            Aspect("overall", "dialogue", (1, 2, 3), "How good is the dialogue?")])

    def load_all(self, data_dir: Path) -> list[Conversation]:
        return toy_conversations()


class WordCount:
    """Predicts minus the number of words of a reply (turn level) and its dialogue mean (dialogue level)."""

    def __init__(self, name: str = "word_count"):
        self.name = name

    def required_files(self, dataset, aspects) -> list[str]:
        return []

    def predict(self, inputs: Inputs) -> MethodOutput:
        turn_rows, dial_rows = [], []
        for c in inputs.convs:
            counts = [-len(t.utterance.split()) for t in c.evaluated_turns()]
            for a in inputs.aspects:
                if a.level == "turn":
                    turn_rows += [(a.name, c.conv_id, t.turn_ind, n) for t, n in zip(c.evaluated_turns(), counts)]
                else:
                    dial_rows.append((a.name, c.conv_id, sum(counts) / len(counts)))
        preds = Predictions(pd.DataFrame(turn_rows, columns=TURN_COLUMNS), pd.DataFrame(dial_rows,
                                                                                         columns=DIALOGUE_COLUMNS))
        return MethodOutput(preds, label="word count (toy method)")


# ---------------------------------------------------------------- parts of live FACE (face/pipeline/parts.py)

class OneLineInstructions(InstructionSource):
    """A toy instruction source: one fixed instruction per aspect (``method.instructions.source=`` this class)."""

    name: ClassVar[str] = "one_line"

    def load(self, data_dir, aspect: str) -> list[Instruction]:
        return [Instruction("one_line", f"Rate how well the particle serves {aspect.replace('_', ' ')}.", 1,
                            "one_line")]


class MedianOfSamples(SamplingEstimator):
    """A toy scorer: the median of the sampled scores instead of their mean (``method.scoring.estimator=`` this
    class)."""

    name: ClassVar[str] = "median"

    def combine(self, values: list[int]) -> float:
        return float(statistics.median(values))
