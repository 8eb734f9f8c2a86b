"""The evaluation aspects of CRSArena-Eval: level, human scale and a one-line definition."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Aspect:
    name: str
    level: str  # "turn" (one label per assistant turn) or "dialogue" (one per conversation)
    scale: tuple[int, ...]  # the values a human label can take in CRSArena-Eval
    definition: str


ASPECTS: dict[str, Aspect] = {
    a.name: a
    for a in [
        Aspect("relevance", "turn", (0, 1, 2),
               "Does the assistant's response address the user's request and stay on topic?"),
        Aspect("interestingness", "turn", (0, 1, 2),
               "Is the assistant's response engaging, informative or likely to spark the user's interest?"),
        Aspect("understanding", "dialogue", (0, 1, 2),
               "Did the assistant understand the user's requests and preferences throughout the dialogue?"),
        Aspect("task_completion", "dialogue", (0, 1, 2),
               "Did the assistant make recommendations that the user accepted or was satisfied with?"),
        Aspect("interest_arousal", "dialogue", (0, 1, 2),
               "Did the assistant try to spark the user's interest in something new?"),
        Aspect("efficiency", "dialogue", (0, 1),
               "Did the assistant reach good recommendations quickly, without unnecessary turns?"),
        Aspect("dialogue_overall", "dialogue", (0, 1, 2, 3, 4),
               "Overall, how good was the assistant as a conversational recommender in this dialogue?"),
    ]
}

TURN_ASPECTS = tuple(a for a, spec in ASPECTS.items() if spec.level == "turn")
DIALOGUE_ASPECTS = tuple(a for a, spec in ASPECTS.items() if spec.level == "dialogue")

# Labels present in CRSArena-Eval but not reported in the paper.
UNREPORTED_DIALOGUE_LABELS = ("preference_elicitation", "explanation")

# Names used for dialogue_overall in the authors' files.
ASPECT_ALIASES = {"dialog_overall": "dialogue_overall", "overall_impression": "dialogue_overall"}


def canonical_aspect(name: str) -> str:
    """Map a legacy alias to its canonical name and reject unknown aspects."""
    name = ASPECT_ALIASES.get(name, name)
    if name not in ASPECTS:
        raise KeyError(f"unknown aspect {name!r}; known: {', '.join(ASPECTS)} (aliases: {', '.join(ASPECT_ALIASES)})")
    return name
