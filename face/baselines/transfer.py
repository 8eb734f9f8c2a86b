"""FACE on another dataset with the CRSArena-optimized instructions: the transfer of the paper (Topical-Chat,
PersonaChat), with no tuning on the target data.

A target quality is scored with the instructions released for its mapped CRSArena-Eval aspect
(``mapping``: target quality -> CRSArena aspect). Everything else is the target's: the quality's definition
and particle-based definition, its annotation scale and level descriptions (what the annotators were
asked), the target dataset's wording of the judged systems. Rationale: the instructions are what the
optimizer learned and what is claimed to transfer; the definition and scale must be the target's or the
scores would not be on the labels' scale. Qualities without a mapping are not scored.

Default mapping (``conf/method/face_transfer.yaml``), by meaning:
  maintains_context <- relevance (turn level: does the turn fit the conversation so far)
  engaging          <- interestingness (turn level: does the turn hold the user's interest)
  understandable    <- understanding (dialogue level in CRSArena: does the assistant understand the user;
                       the closest, but a different question: USR asks whether the response can be understood)
  overall           <- dialogue_overall (dialogue level in CRSArena; applied to one response here)
Natural and Uses Knowledge have no CRSArena counterpart and are left out. The paper does not say which
mapping it used; this one is ours.
"""

from __future__ import annotations

from typing import Sequence

from face.aspects import Aspect
from face.datasets.crsarena import ASPECTS as CRS_ASPECTS
from face.pipeline.method import Face
from face.settings import settings


@settings("method", conf="method/face_transfer.yaml")
class FaceTransfer(Face):
    mapping: dict[str, str]

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = {k: v for k, v in self.mapping.items() if v not in CRS_ASPECTS}
        if bad:
            raise ValueError(f"method.mapping: {bad} name no CRSArena-Eval aspect ({', '.join(CRS_ASPECTS)})")
        if self.source.name not in ("released", "file"):
            raise ValueError("method.instructions.source must be released (the authors' CRSArena instructions) or "
                             "file (an optimized set for CRSArena's aspects): the transfer uses CRSArena instructions")

    def source_aspect(self, target: str) -> str:
        """The CRSArena-Eval aspect whose instructions score the target quality."""
        if target not in self.mapping:
            raise ValueError(f"quality {target!r} has no CRSArena aspect in method.mapping "
                             f"({', '.join(f'{k} <- {v}' for k, v in self.mapping.items())}); "
                             f"choose aspects among {list(self.mapping)}")
        return self.mapping[target]

    def required_files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        """The instruction files of the mapped CRSArena-Eval aspects (the target's own particles are decomposed)."""
        sources = [CRS_ASPECTS[s] for s in dict.fromkeys(self.source_aspect(a.name) for a in aspects)]
        return self.units.files(dataset) + self.source.files(dataset, sources)

    def describe(self, llm, instructions) -> str:
        mapped = ", ".join(f"{k} <- {self.mapping[k]}" for k in instructions)
        return super().describe(llm, instructions) + f"; TRANSFER: CRSArena instructions ({mapped}), no tuning"
