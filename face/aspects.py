"""What an aspect is: name, level, the human scale, a definition, and the annotation scheme.

One word per meaning: an aspect's *level* is where its labels live (``turn`` or ``dialogue``; the meta-evaluation
adds ``system``, means over a system's items); its *grades* are the annotation scheme, what each score of the scale
means (``Aspect.grades``, ``grade_lines``; the scoring prompts' "grades").

Aspects belong to datasets (``face.datasets``): each dataset declares the aspects its human labels
were collected for. CRSArena-Eval's live in ``face.datasets.crsarena``, USR's in ``face.datasets.usr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

LEVELS = ("turn", "dialogue")


@dataclass(frozen=True)
class Aspect:
    name: str
    level: str  # "turn" (one label per evaluated assistant turn) or "dialogue" (one per conversation)
    scale: tuple[int, ...]  # the values a human label can take
    definition: str  # one line: the quality of a response / dialogue
    grades: Mapping[int, str] = field(default_factory=dict, hash=False)  # score -> what annotators were told
    particle_definition: str = ""  # the same quality asked of one particle (the faithful scoring prompt)
    # the live method's instructions for an aspect of your own (an aspects file: face.datasets.chatlogs); the
    # released instruction source uses them where the authors released none
    instructions: tuple[str, ...] = field(default=(), hash=False)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"aspect {self.name!r}: level must be one of {LEVELS}, got {self.level!r}")
        if not self.scale or list(self.scale) != sorted(set(self.scale)):
            raise ValueError(f"aspect {self.name!r}: scale must be increasing distinct integers, got {self.scale}")
        extra = set(self.grades) - set(self.scale)
        if extra:
            raise ValueError(f"aspect {self.name!r}: grades for values outside the scale: {sorted(extra)}")

    @property
    def low(self) -> int:
        return min(self.scale)

    @property
    def high(self) -> int:
        return max(self.scale)

    @property
    def of_particle(self) -> str:
        return self.particle_definition or self.definition

    def grade_lines(self) -> str:
        """The annotation scheme, one ``- value: description`` line per score (empty if the dataset gives none)."""
        return "\n".join(f"- {v}: {self.grades[v]}" for v in self.scale if v in self.grades)


def aspect_table(aspects: Iterable[Aspect]) -> dict[str, Aspect]:
    out: dict[str, Aspect] = {}
    for a in aspects:
        if a.name in out:
            raise ValueError(f"aspect {a.name!r} declared twice")
        out[a.name] = a
    return out
