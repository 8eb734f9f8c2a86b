"""Method ``face_released``: the authors' per-particle scores, aggregated by our code (no LLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from face.aspects import Aspect
from face.data import released_instructions_file, released_scores_file
from face.datasets.face_released import load_instructions, load_particle_scores
from face.methods import Inputs, MethodOutput
from face.pipeline.aggregate import Aggregator, aggregate
from face.settings import settings

LABEL = ("FACE (ours, released scores): the authors' per-particle scores — their LLM, 5 samples per "
         "particle × instruction, 16 instructions — aggregated and meta-evaluated by this project")


def load_scores(data_dir: str | Path, aspects: Sequence[str], conv_ids: set[str] | None = None) -> pd.DataFrame:
    frames = [load_particle_scores(Path(data_dir) / released_scores_file(a), a) for a in aspects]
    scores = pd.concat(frames, ignore_index=True)
    if conv_ids is not None:
        scores = scores[scores["conv_id"].isin(conv_ids)]
    return scores


@settings("method", conf="method/face_released.yaml")
class FaceReleased:
    name: str
    instruction_agg: Aggregator  # over a particle's instructions
    particle_agg: Aggregator  # over the particles of a turn / of a dialogue
    instructions: list[str] | None  # subset of instruction ids; None = all 16

    def required_files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        if not dataset.released_artifacts:
            raise ValueError(f"method {self.name} replays the authors' released scores, which exist only for "
                             f"CRSArena-Eval, not for {dataset.title}. Your own conversations: `face evaluate FILE`, "
                             "or experiment=crsarena_main | ablation_no_particles | ablation_no_optimization | "
                             "ablation_scoring with dataset.file=FILE (or dataset=chat_logs dataset.path=FILE)")
        return [f(a.name) for a in aspects for f in (released_scores_file, released_instructions_file)]

    def load(self, inputs: Inputs) -> pd.DataFrame:
        """The released per-particle × instruction scores of the selected conversations."""
        return load_scores(inputs.data_dir, [a.name for a in inputs.aspects], {c.conv_id for c in inputs.convs})

    def predict(self, inputs: Inputs) -> MethodOutput:
        scores = self.load(inputs)
        preds = aggregate(scores, inputs.levels, self.instruction_agg, self.particle_agg, self.instructions)
        inputs.register_instructions("released", lambda a: load_instructions(
            inputs.data_dir / released_instructions_file(a.name)))
        return MethodOutput(preds, scores, LABEL)
