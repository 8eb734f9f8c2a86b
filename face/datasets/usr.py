"""USR human judgements (Mehri & Eskenazi, 2020) for Topical-Chat and PersonaChat.

``load_usr`` reads the file as released (one record per dialogue context with several annotated
responses) and turns each (context, response) pair into a ``Conversation`` whose last
assistant turn is the response under evaluation, labelled with the annotators' mean per quality, and
whose system is the response generator. Roles are assigned backwards from the response, alternating.

The dataset ``USR`` (``conf/dataset/``): USR's human judgements of Topical-Chat and PersonaChat responses: turn
level (one evaluated response per item) for each of the six qualities; the system is the response generator.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from face.aspects import Aspect, aspect_table
from face.data import USR_FILES
from face.data.io import check_label, check_type, field, read_json
from face.data.schema import ASSISTANT, USER, Conversation, Turn
from face.datasets import Dataset, Selection
from face.errors import DataError
from face.settings import settings

USR_ASPECTS = ("Understandable", "Natural", "Maintains Context", "Engaging", "Uses Knowledge", "Overall")
GROUND_TRUTH = "Original Ground Truth"

# The qualities, their scales and our wording of what annotators were asked (USR, section 3).
ASPECTS: dict[str, Aspect] = aspect_table([
    Aspect("understandable", "turn", (0, 1), "Can the response be understood given the conversation so far?",
           {0: "No: the response cannot be understood in this context.", 1: "Yes: the response is understandable."},
           "Can the particle be understood given the conversation so far?"),
    Aspect("natural", "turn", (1, 2, 3), "Is the response something a person would naturally say?",
           {1: "Not natural.", 2: "Somewhat natural.", 3: "Natural."},
           "Is the particle something a person would naturally say?"),
    Aspect("maintains_context", "turn", (1, 2, 3), "Does the response continue the conversation sensibly?",
           {1: "No: it ignores or contradicts the conversation.", 2: "Somewhat.", 3: "Yes: a valid continuation."},
           "Does the particle continue the conversation sensibly?"),
    Aspect("engaging", "turn", (1, 2, 3), "Is the response interesting rather than dull?",
           {1: "Dull.", 2: "Somewhat interesting.", 3: "Interesting."},
           "Does the particle make the response interesting rather than dull?"),
    Aspect("uses_knowledge", "turn", (0, 1), "Does the response make use of the fact it was conditioned on?",
           {0: "No: the fact is not used.", 1: "Yes: the fact is used."},
           "Does the particle make use of the fact the response was conditioned on?"),
    Aspect("overall", "turn", (1, 2, 3, 4, 5), "What is the overall quality of the response?",
           {1: "Very poor.", 2: "Poor.", 3: "Fair.", 4: "Good.", 5: "Very good."},
           "What does the particle say about the overall quality of the response?"),
])
_KEY = {name: key for key, name in zip(USR_ASPECTS, ASPECTS)}  # our aspect name -> the file's key


def load_usr(path: str | Path, exclude_ground_truth: bool = True) -> list[Conversation]:
    """One conversation per (context, response) of the file as released (one record per dialogue context with several
    annotated responses); ids ``{context index}:{generator}``.

    The original ground-truth response is the reference of every context (``meta["reference"]``);
    with ``exclude_ground_truth`` (USR's protocol) it is not itself an evaluated item."""
    path = Path(path)
    raw = check_type(read_json(path), list, path, "top level")
    if not raw:
        raise DataError(path, "no dialogue contexts (an empty list)", "top level")
    out = []
    for i, obj in enumerate(raw):
        rec = f"context {i}"
        responses = [_response(r, path, f"{rec}, response {j}")
                     for j, r in enumerate(field(obj, "responses", list, path, rec))]
        context = [t.strip() for t in field(obj, "context", str, path, rec).strip().split("\n") if t.strip()]
        meta = {"fact": field(obj, "fact", str, path, rec),
                "reference": next((text for model, text, _ in responses if model == GROUND_TRUTH), None)}
        n = len(context) + 1  # the context's turns and the response
        for model, text, labels in responses:
            if exclude_ground_truth and model == GROUND_TRUTH:
                continue
            turns = tuple(Turn(k, ASSISTANT if (n - 1 - k) % 2 == 0 else USER, t, labels if k == n - 1 else {})
                          for k, t in enumerate([*context, text]))
            slug = re.sub(r"[^a-z0-9.]+", "-", model.lower()).strip("-")
            out.append(Conversation(f"{i}:{slug}", turns, {}, system=model, split="all", evaluated=(n - 1,),
                                    meta=meta))
    return out


def _response(r: Any, path: Path, rec: str) -> tuple[str, str, dict[str, float]]:
    """(generator, response, each quality's mean rating) of one annotated response."""
    labels = {}
    for name, key in _KEY.items():
        vals = field(r, key, list, path, rec)
        if not vals:
            raise DataError(path, f"no ratings for {key!r}", rec)
        labels[name] = sum(check_label(v, ASPECTS[name].scale, path, f"{rec}, {key}") for v in vals) / len(vals)
    return field(r, "model", str, path, rec), field(r, "response", str, path, rec).strip(), labels


TITLES = {"topical_chat": "USR Topical-Chat", "persona_chat": "USR PersonaChat"}


Corpus = Literal["topical_chat", "persona_chat"]  # the keys of USR_FILES (tests hold them equal)


@settings("dataset", conf="dataset/usr_topical_chat.yaml")
class USRSettings(Selection):
    corpus: Corpus
    exclude_ground_truth: bool  # USR's protocol: the original response is the reference, not a scored item


class USR(Dataset):
    aspects = ASPECTS
    response_level = True
    assistant = "open-domain chit-chat assistant"
    judged = "open-domain dialogue systems"

    def __init__(self, name: str, corpus: Corpus, **settings: Any):
        own = USRSettings(name=name, corpus=corpus, **settings)
        super().__init__(own)
        self.corpus = own.corpus
        self.title = TITLES[own.corpus]
        self.exclude_ground_truth = own.exclude_ground_truth

    def files(self) -> list[str]:
        return [USR_FILES[self.corpus]]

    def load_all(self, data_dir: Path) -> list[Conversation]:
        return load_usr(Path(data_dir) / USR_FILES[self.corpus], self.exclude_ground_truth)

    def published(self, data_dir: Path) -> pd.DataFrame:
        """USR's published turn-level correlations (its Tables 3-6) and the FACE paper's transfer headline,
        with their citations (``face.datasets.published``); the data files are not needed."""
        from face.datasets.published import usr_published

        return usr_published(self.corpus)
