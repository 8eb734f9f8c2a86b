"""CRSArena-Eval: 467 conversations with 9 CRSs, turn- and dialogue-level human labels.

The aspects below are the ones the paper reports, with the scale and the score-level descriptions of
CRSArena-Eval's annotation scheme (in our words). Conversation ids read ``{system}_{dataset}_{uuid}``:
the CRS is ``{system}_{dataset}`` and the split is the CRS's training dataset (``redial`` / ``opendialkg``).

The dataset ``CRSArenaEval`` (``conf/dataset/``): CRSArena-Eval (467 conversations, 9 CRSs, ReDial / OpenDialKG
splits), or the user's own conversations in its format (``file=``, human labels optional).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from face.aspects import Aspect, aspect_table
from face.data import CRSARENA_EVAL, PUBLISHED_TABLE
from face.data.io import as_id, check_label, check_text, check_type, field, parse_all, raise_all, read_json
from face.data.schema import ASSISTANT, USER, Conversation, Turn
from face.datasets import PUBLISHED_COLUMNS, Dataset, Selection
from face.errors import DataError
from face.settings import settings

SPLITS = ("redial", "opendialkg")

ASPECTS: dict[str, Aspect] = aspect_table([
    Aspect("relevance", "turn", (0, 1, 2),
           "Does the assistant's response address the user's request and stay on topic?",
           {0: "No: the response is not relevant to the previous turn.",
            1: "Somewhat: the response is partly relevant to the previous turn.",
            2: "Yes: the response is relevant to the previous turn."},
           "Does the particle make sense at this point and serve what the user is interested in?"),
    Aspect("interestingness", "turn", (0, 1, 2),
           "Is the assistant's response engaging, informative or likely to spark the user's interest?",
           {0: "No: the response presents facts without any chit-chat.",
            1: "Somewhat: the response adds a little chit-chat to the facts it presents.",
            2: "Yes: the response mixes chit-chat with the facts it presents."},
           "Does the particle make the user want to go on with the conversation?"),
    Aspect("understanding", "dialogue", (0, 1, 2),
           "Did the assistant understand the user's requests and preferences throughout the dialogue?",
           {0: "No: the assistant misses the user's request or fails to act on it.",
            1: "Somewhat: the assistant partly understands the request or partly fulfils it.",
            2: "Yes: the assistant understands the user's request and fulfils it."},
           "Does the particle show that the assistant grasped the user's request and works to fulfil it?"),
    Aspect("task_completion", "dialogue", (0, 1, 2),
           "Did the assistant make recommendations that the user accepted or was satisfied with?",
           {0: "No: the user accepts none of the assistant's suggestions.",
            1: "Somewhat: the user accepts the suggestions only in part.",
            2: "Yes: the user finally accepts the assistant's suggestions."},
           "Does the particle make recommendations that the user ends up accepting?"),
    Aspect("interest_arousal", "dialogue", (0, 1, 2),
           "Did the assistant try to spark the user's interest in something new?",
           {0: "No: the assistant makes no attempt to raise the user's interest.",
            1: "Somewhat: the assistant makes some attempt to raise the user's interest.",
            2: "Yes: the assistant tries to raise the user's interest."},
           "Does the particle try to raise the user's interest in something new?"),
    Aspect("efficiency", "dialogue", (0, 1),
           "Did the assistant reach good recommendations quickly, without unnecessary turns?",
           {0: "No: no good suggestion within the first three interactions.",
            1: "Yes: good suggestions within the first three interactions."},
           "Does the particle help reach recommendations that fit the user's interests within the first three "
           "interactions?"),
    Aspect("dialogue_overall", "dialogue", (0, 1, 2, 3, 4),
           "Overall, how good was the assistant as a conversational recommender in this dialogue?",
           {0: "Very dissatisfied with the assistant's performance.",
            1: "Dissatisfied with the assistant's performance.",
            2: "Neutral about the assistant's performance.",
            3: "Satisfied with the assistant's performance.",
            4: "Very satisfied with the assistant's performance."},
           "What does the particle say about the overall impression the assistant makes?"),
])

# Labels present in CRSArena-Eval but not reported in the paper.
UNREPORTED_DIALOGUE_LABELS = ("preference_elicitation", "explanation")

# Names used for dialogue_overall in the authors' files.
ASPECT_ALIASES = {"dialog_overall": "dialogue_overall", "overall_impression": "dialogue_overall"}

UNREPORTED_SCALE = (0, 2)  # preference_elicitation and explanation: no / somewhat / yes, like the others
_KNOWN_DIALOGUE_LABELS = {a for a, spec in ASPECTS.items() if spec.level == "dialogue"} | {*UNREPORTED_DIALOGUE_LABELS}
_KNOWN_TURN_LABELS = {a for a, spec in ASPECTS.items() if spec.level == "turn"}


def system_and_split(conv_id: str) -> tuple[str, str]:
    """``kbrd_redial_<uuid>`` -> (``kbrd_redial``, ``redial``); ids of another shape: (first token, ``all``)."""
    parts = conv_id.split("_")
    if len(parts) >= 3 and parts[1] in SPLITS:
        return f"{parts[0]}_{parts[1]}", parts[1]
    return parts[0], "all"


def optional_id(raw: dict, keys: tuple[str, ...], path: Path, where: str, what: str) -> str | None:
    """The first of ``keys`` present and not null, checked as an id (``face.data.io.as_id``); None if none is."""
    for key in keys:
        if raw.get(key) is not None:
            return as_id(raw[key], path, f"{where}, key {key!r}", what)
    return None


def _labels(raw: dict, known: set[str], path: Path, record: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in raw.items():
        canon = ASPECT_ALIASES.get(name, name)
        if canon not in known:
            raise DataError(path, f"unknown aspect {name!r} (known: {', '.join(sorted(known))})", record)
        spec = ASPECTS.get(canon)
        out[canon] = check_label(value, spec.scale if spec else UNREPORTED_SCALE, path, f"{record}, label {name!r}")
    return out


def parse_conversation(raw: object, path: Path, record: str, require_labels: bool = True,
                       allow_empty_utterances: bool = True) -> Conversation:
    """One conversation in CRSArena-Eval's format. ``conv_id`` (and the optional ``system``, the CRS's name; by
    default the id's first part): a string or an integer (kept as its digits).
    ``allow_empty_utterances``: the released CRSArena-Eval has 9 empty ASST utterances (labelled 0: the CRS
    said nothing), so it is read as published; a user's file is refused on an empty or blank utterance.
    Errors name the conversation by its id and a turn by its position in ``dialogue`` from 1 (with its
    ``turn_ind``)."""
    if not isinstance(raw, dict):
        raise DataError(path, f"expected an object, got {type(raw).__name__}", record)
    if "conv_id" not in raw:
        raise DataError(path, "missing key 'conv_id'", record)
    conv_id = as_id(raw["conv_id"], path, record, "conv_id")
    record = f"conversation {conv_id!r}"
    dialogue = field(raw, "dialogue", list, path, record)
    if not dialogue:
        raise DataError(path, "empty dialogue", record)
    turns: list[Turn] = []
    for i, t in enumerate(dialogue, start=1):
        turns.append(_turn(t, turns[-1] if turns else None, path, f"{record}, turn {i}", allow_empty_utterances))
    _check_roles(turns, path, record)
    dial_labels = (field(raw, "dial_level_aggregated", dict, path, record) if require_labels
                   else check_type(raw.get("dial_level_aggregated") or {}, dict, path, record))
    name, split = system_and_split(conv_id)
    system = optional_id(raw, ("system",), path, record, "system name") or name  # the CRS's name, if the id lacks it
    return Conversation(conv_id, tuple(turns), _labels(dial_labels, _KNOWN_DIALOGUE_LABELS, path, record),
                        system=system, split=split)


def _turn(t: Any, prev: Turn | None, path: Path, rec: str, allow_empty: bool) -> Turn:
    """One entry of ``dialogue``: role, increasing ``turn_ind``, utterance and turn labels checked."""
    role = field(t, "role", str, path, rec)
    if role not in (USER, ASSISTANT):
        raise DataError(path, f"unknown role {role!r} (expected {USER!r} or {ASSISTANT!r})", rec)
    # (field() checked that t is an object)
    labels = check_type(t.get("turn_level_aggregated") or {}, dict, path, rec + ", turn_level_aggregated")
    turn_ind = field(t, "turn_ind", int, path, rec)
    rec = f"{rec} (turn_ind {turn_ind})"
    if turn_ind < 0:
        raise DataError(path, f"negative turn_ind {turn_ind}", rec)
    if prev is not None and turn_ind <= prev.turn_ind:
        raise DataError(path, f"turn_ind {turn_ind} after {prev.turn_ind}: "
                              f"{'duplicate' if turn_ind == prev.turn_ind else 'out of order'} "
                              "(turn_ind must increase)", rec)
    text = check_text(field(t, "utterance", str, path, rec), path, f"{rec}, key 'utterance'")
    if not allow_empty and not text.strip():
        raise DataError(path, "empty utterance", rec)
    return Turn(turn_ind, role, text, _labels(labels, _KNOWN_TURN_LABELS, path, rec))


def _check_roles(turns: list[Turn], path: Path, record: str) -> None:
    """Roles alternate, only assistant turns carry labels, and there is one to evaluate."""
    for prev, cur in zip(turns, turns[1:]):
        if prev.role == cur.role:
            raise DataError(path, f"roles do not alternate: turns with turn_ind {prev.turn_ind} and {cur.turn_ind} "
                                  f"are both {cur.role}", record)
    for n, t in enumerate(turns, start=1):
        if t.labels and t.role == USER:
            raise DataError(path, f"turn labels {sorted(t.labels)} on a {USER} turn (only {ASSISTANT} turns are "
                                  "labelled)", f"{record}, turn {n} (turn_ind {t.turn_ind})")
    if not any(t.role == ASSISTANT for t in turns):
        raise DataError(path, f"no {ASSISTANT} turn: nothing to evaluate", record)


def load_conversations(path: str | Path, require_labels: bool = True,
                       allow_empty_utterances: bool = True) -> list[Conversation]:
    """Load CRSArena-Eval (or any file in its format: a JSON list of conversations); a user's file with
    ``allow_empty_utterances=False`` (see ``parse_conversation``). Every bad conversation is listed in one error."""
    path = Path(path)
    raw = check_type(read_json(path), list, path, "top level")
    if not raw:
        raise DataError(path, "no conversations (an empty list)", "top level")
    convs = parse_all(path, parse_conversation, [(c, path, f"conversation {i}", require_labels, allow_empty_utterances)
                                                 for i, c in enumerate(raw, start=1)], "conversations")
    return check_unique_ids(convs, path)


def check_unique_ids(convs: list[Conversation], path: Path) -> list[Conversation]:
    """``convs`` unchanged, or a DataError naming every repeated conversation id."""
    first = {c.conv_id: i for i, c in reversed(list(enumerate(convs)))}
    raise_all(path, [DataError(path, "duplicate conversation id", f"conversation {c.conv_id!r}")
                     for i, c in enumerate(convs) if first[c.conv_id] < i], "conversation ids")
    return convs


# ---------------------------------------------------------------- the published Table 2 (the FACE paper)

_SPLIT_KEYS = {"CRSArena-Eval_RD": "redial", "CRSArena-Eval_KG": "opendialkg"}
_COEF_KEYS = {"pearson_r": "pearson", "spearman_rho": "spearman"}


def load_published_table(path: str | Path) -> pd.DataFrame:
    """Published Table 2 as a long table: method, split, aspect, coefficient, value (None = not reported)."""
    path = Path(path)
    rows = []
    for split_key, methods in check_type(read_json(path), dict, path, "top level").items():
        if split_key not in _SPLIT_KEYS:
            raise DataError(path, f"unknown split {split_key!r}; expected {', '.join(_SPLIT_KEYS)}")
        for method, aspects in check_type(methods, dict, path, split_key).items():
            for aspect, coefs in check_type(aspects, dict, path, f"{split_key}/{method}").items():
                rec = f"{split_key}/{method}/{aspect}"
                canon = ASPECT_ALIASES.get(aspect, aspect)
                if canon not in ASPECTS:
                    raise DataError(path, f"unknown aspect {aspect!r}", rec)
                for coef_key, value in check_type(coefs, dict, path, rec).items():
                    if coef_key not in _COEF_KEYS:
                        raise DataError(path, f"unknown coefficient {coef_key!r}", rec)
                    if value is not None:
                        check_type(value, float, path, f"{rec}/{coef_key}")
                    rows.append((method, _SPLIT_KEYS[split_key], canon, _COEF_KEYS[coef_key],
                                 None if value is None else float(value)))
    return pd.DataFrame(rows, columns=PUBLISHED_COLUMNS)


@settings("dataset", conf="dataset/crsarena_eval.yaml")
class CRSArenaSettings(Selection):
    file: str | None  # your own conversations in CRSArena-Eval's format instead of the released file
    repeat: int = Field(ge=1)  # scale benchmarks: every conversation K times


class CRSArenaEval(Dataset):
    title = "CRSArena-Eval"
    splits_all = SPLITS
    aspects = ASPECTS
    aliases = ASPECT_ALIASES
    assistant = "movie-recommendation assistant"
    judged = "conversational recommender systems"

    def __init__(self, **settings: Any):
        own = CRSArenaSettings(**settings)
        super().__init__(own)
        self.file = Path(own.file) if own.file else None
        self.repeat = own.repeat
        if self.file:
            self.title = self.file.name
        if own.repeat > 1:
            self.title += f" ×{own.repeat}"
        self.released_artifacts = self.file is None  # the authors' particles and scores: not of the user's file
        self.is_subset = self.is_subset or self.file is not None or self.repeat > 1

    def files(self) -> list[str]:
        return ([] if self.file else [CRSARENA_EVAL]) + [PUBLISHED_TABLE]

    def load_all(self, data_dir: Path) -> list[Conversation]:
        if self.file is not None:
            if not self.file.exists():  # the user's own file: no "run the fetch step" hint
                raise DataError(self.file, "file not found (dataset.file)")
            convs = load_conversations(self.file, require_labels=False, allow_empty_utterances=False)
        else:
            convs = load_conversations(Path(data_dir) / CRSARENA_EVAL)
        return convs + [copy_of(c, k) for k in range(2, self.repeat + 1) for c in convs]

    def published(self, data_dir: Path) -> pd.DataFrame:
        return load_published_table(Path(data_dir) / PUBLISHED_TABLE)


def copy_of(conv: Conversation, k: int) -> Conversation:
    """Copy k of a conversation (``dataset.repeat``, for scale benchmarks): id ``<id>~k``, every utterance followed by
    `` (copy k)`` so that none of its prompts is another's (the replay judge reads a copy as its original), the
    same labels, system and split."""
    turns = tuple(replace(t, utterance=f"{t.utterance} (copy {k})") for t in conv.turns)
    return replace(conv, conv_id=f"{conv.conv_id}~{k}", turns=turns)


def write_conversations(convs: list[Conversation], path: Path) -> Path:
    """Conversations in CRSArena-Eval's format, without labels (``load_conversations`` reads them back; ``face
    report`` does)."""
    import json

    from face.files import atomic_write_text

    return atomic_write_text(path, json.dumps([{"conv_id": c.conv_id, "system": c.system, "dialogue": [
        {"turn_ind": t.turn_ind, "role": t.role, "utterance": t.utterance} for t in c.turns]} for c in convs],
        indent=1))
