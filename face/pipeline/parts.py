"""The parts live FACE is composed of (``face/pipeline/method.py``): where the instructions come from, and what is
scored -- particles an LLM decomposes, the authors' released particles, or whole turns / dialogues.

Each part is a small class; the config names it: ``method.instructions.source`` and ``method.particles.source``
take a built-in name (the keys of ``INSTRUCTION_SOURCES`` / ``PARTICLE_SOURCES``) or the dotted path of a class of
your own (``method.instructions.source=my_project.MyInstructions``), built with the settings it declares as
fields (``file``, ``ref`` for instructions; the ``method.particles`` block for particles). ``method.unit=whole``
scores whole turns and dialogues instead of particles. ``Face`` only composes them: a new variant is a new class,
not an edit of ``Face``.

An instruction source answers two questions: which data files it needs (``files``, which also refuses what cannot
work, before anything is fetched or sent) and the instructions of an aspect (``load``). A unit source says what
it needs (``files``), what it knows before sending anything (``proxy``: the particle counts of the cost estimate),
what its own requests cost (``cost_stages``) and, in the run, the decompositions the scoring stage scores
(``decompositions``; None: whole turns / dialogues). Capabilities are declared attributes: ``unit`` (what
``scoring.units_for`` scores) and ``decomposes`` (it sends decomposition requests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, Sequence, TypeVar

from face.aspects import Aspect
from face.data import RELEASED_PARTICLES, released_instructions_file
from face.data.io import check_type, read_json
from face.data.io import field as json_field
from face.data.schema import Conversation, Instruction
from face.datasets.crsarena import ASPECTS as RELEASED_ASPECTS  # the aspects the authors released instructions for
from face.datasets.face_released import load_instructions, load_released_particles
from face.errors import DataError, import_class
from face.pipeline.estimate import Pricing, decomposition_cost, particles_per_turn
from face.pipeline.particles import Decomposition, ParticlesSpec, decompose, from_released, whole_turn
from face.prompts import generic_instruction, initial_instruction, unit_wording

T = TypeVar("T")

log = logging.getLogger(__name__)

# particles per assistant turn in the authors' released decomposition of CRSArena-Eval (6,274 / 2,235): the
# estimate's particle count for conversations that are not decomposed yet and have no released particles
RELEASED_PARTICLES_PER_TURN = 6274 / 2235


def build(registry: dict[str, type[T]], name: str, setting: str, settings: dict) -> T:
    """The part ``name`` (a key of ``registry`` or a dotted class path, as its setting's validator ``registered``
    checked), given the ``settings`` it has fields for."""
    cls = registry.get(name) or import_class(name, setting)
    own = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else set()
    return cls(**{k: v for k, v in settings.items() if k in own})


# ---------------------------------------------------------------- instruction sources


class InstructionSource:
    """Where an aspect's instructions come from. ``name`` is how run descriptions and MLflow name it."""

    name: ClassVar[str] = "custom"

    def files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        """Data files to fetch first; raise ValueError now for aspects it cannot give instructions for."""
        return []

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        raise NotImplementedError


@dataclass
class ReleasedInstructions(InstructionSource):
    """The authors' top-16 per aspect (CRSArena-Eval's seven aspects)."""

    name: ClassVar[str] = "released"
    # an aspect of your own (an aspects file) brings its instructions: they serve it (the authors released none)
    own: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        self.own.update({a.name: a.instructions for a in aspects if a.name not in RELEASED_ASPECTS and a.instructions})
        missing = [a.name for a in aspects if a.name not in RELEASED_ASPECTS and a.name not in self.own]
        if missing:
            raise ValueError(f"method.instructions.source=released: the authors released instructions for "
                             f"{', '.join(RELEASED_ASPECTS)}, not for {', '.join(missing)} ({dataset.title}); give "
                             "an aspect of your own its instructions in the aspects file, or use "
                             "method.instructions.source=initial or file")
        return [released_instructions_file(a.name) for a in aspects if a.name in RELEASED_ASPECTS]

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        if aspect in self.own:
            return [Instruction(f"{aspect}-{i}", text, i, "aspects_file")
                    for i, text in enumerate(self.own[aspect], start=1)]
        return load_instructions(Path(data_dir) / released_instructions_file(aspect))


class GenericInitial(InstructionSource):
    """The paper's generic initial instruction ("FACE w/o train")."""

    name: ClassVar[str] = "initial"

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        return [Instruction("initial", generic_instruction(aspect), 1, "initial")]


class AspectInitial(InstructionSource):
    """Our aspect-specific initial instructions (``face/prompts/initial/<aspect>.txt``)."""

    name: ClassVar[str] = "initial_aspect"

    def files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        for a in aspects:
            initial_instruction(a.name)  # fails now, not after the decomposition, if there is none
        return []

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        return [Instruction("initial_aspect", initial_instruction(aspect), 1, "initial_aspect")]


@dataclass
class FileInstructions(InstructionSource):
    """A JSON file ``{aspect: [{instruction_id, text}]}`` (the optimizer writes one)."""

    name: ClassVar[str] = "file"
    file: str | None = None

    def __post_init__(self) -> None:
        if not self.file:
            raise ValueError("method.instructions.source=file needs method.instructions.file")

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        path = Path(self.file or "")
        raw = check_type(read_json(path), dict, path, "top level")
        items = check_type(raw.get(aspect, []), list, path, aspect)
        out = [Instruction(json_field(x, "instruction_id", str, path, f"{aspect}[{i}]"),
                           json_field(x, "text", str, path, f"{aspect}[{i}]"), i + 1, "file")
               for i, x in enumerate(items)]
        if not out:
            raise DataError(path, f"no instructions for aspect {aspect!r}")
        return out


@dataclass
class MlflowInstructions(InstructionSource):
    """An optimized set in MLflow (``face/tracking/prompts.py``): NAME@VERSION, prompts:/NAME/V or runs:/RUN_ID."""

    name: ClassVar[str] = "mlflow"
    ref: str | None = None

    def __post_init__(self) -> None:
        if not self.ref:
            raise ValueError("method.instructions.source=mlflow needs method.instructions.ref=NAME@VERSION, "
                             "prompts:/NAME/VERSION or runs:/RUN_ID")

    def load(self, data_dir: Path, aspect: str) -> list[Instruction]:
        from face.tracking.prompts import load_reference

        return load_reference(self.ref or "", aspect)


INSTRUCTION_SOURCES: dict[str, type[InstructionSource]] = {c.name: c for c in (
    ReleasedInstructions, GenericInitial, AspectInitial, FileInstructions, MlflowInstructions)}


# ---------------------------------------------------------------- unit sources: what is scored


class UnitSource:
    """What the scoring stage scores. ``unit``: "particle" or "whole"; ``decomposes``: sends decomposition
    requests (its cost is estimated, its particles written to particles.jsonl)."""

    unit: ClassVar[str] = "particle"
    decomposes: ClassVar[bool] = False

    def files(self, dataset) -> list[str]:
        return []

    def proxy(self, dataset, data_dir: Path, convs: Sequence[Conversation]) -> dict[tuple[str, int], Decomposition]:
        """The particles known before anything is sent (the cost estimate counts them)."""
        return {}

    def proxy_note(self, dataset, proxy: dict) -> str:
        return ""

    def cost_stages(self, convs: Sequence[Conversation], dataset, pricing: Pricing, output_tokens: int) -> list:
        return []

    def decompositions(self, client, convs: Sequence[Conversation], dataset, proxy: dict,
                       json_schema: bool) -> dict[tuple[str, int], Decomposition] | None:
        return proxy

    def reword(self, instruction: Instruction, aspect: Aspect) -> Instruction:
        return instruction

    def wording(self, aspect: Aspect) -> str:
        """How ``reword`` changed the instructions of ``aspect`` ("" = as written): part of the registered prompt's
        name, so a rewording is never filed as a version of the original texts."""
        return ""

    def describe(self) -> str:
        return f"particles: {type(self).__name__}"


class WholeUnits(UnitSource):
    """Whole turns and dialogues, no particles (the no-particles ablation); the instructions are reworded to
    speak of turns or dialogues."""

    unit: ClassVar[str] = "whole"

    def decompositions(self, client, convs, dataset, proxy, json_schema):
        return None

    def reword(self, instruction: Instruction, aspect: Aspect) -> Instruction:
        return replace(instruction, text=unit_wording(instruction.text, aspect.level))

    def wording(self, aspect: Aspect) -> str:
        return f"whole-{aspect.level}"

    def describe(self) -> str:
        return "unit: whole turn / dialogue (no particles)"


class ReleasedParticles(UnitSource):
    """The authors' released decomposition (CRSArena-Eval only): nothing is sent to decompose."""

    def files(self, dataset) -> list[str]:
        if not dataset.released_artifacts:
            raise ValueError(f"method.particles.source=released: the authors released particles for CRSArena-Eval "
                             f"only, not for {dataset.title}; use method.particles.source=llm")
        return [RELEASED_PARTICLES]

    def proxy(self, dataset, data_dir, convs):
        return released_decompositions(Path(data_dir) / RELEASED_PARTICLES, convs)

    def describe(self) -> str:
        return "particles: released"


@dataclass
class LLMParticles(UnitSource):
    """Each assistant turn decomposed by the LLM: k samples, plurality vote (``face/pipeline/particles.py``)."""

    decomposes: ClassVar[bool] = True
    spec: ParticlesSpec = None  # type: ignore[assignment]  # the method.particles block

    def files(self, dataset) -> list[str]:
        # the authors' particles are the particle-count proxy of the estimate where they exist
        return [RELEASED_PARTICLES] if dataset.released_artifacts else []

    def proxy(self, dataset, data_dir, convs):
        """Before decomposition: the authors' particles (CRSArena-Eval), else one per turn (the whole turn)."""
        if dataset.released_artifacts:
            return released_decompositions(Path(data_dir) / RELEASED_PARTICLES, convs)
        return {(c.conv_id, t.turn_ind): Decomposition(c.conv_id, t.turn_ind, (whole_turn(c, t),), "proxy")
                for c in convs for t in c.evaluated_turns()}

    def proxy_note(self, dataset, proxy: dict) -> str:
        if dataset.released_artifacts:
            return f" (particle counts: {particles_per_turn(proxy):.2f} per turn from the released particles)"
        return (f" (particle counts: {RELEASED_PARTICLES_PER_TURN:.2f} per turn, the mean of the released "
                "decomposition of CRSArena-Eval)")

    def cost_stages(self, convs, dataset, pricing, output_tokens):
        return [decomposition_cost(convs, self.spec.k, output_tokens, pricing, dataset.assistant,
                                   self.spec.reasoning)]

    def decompositions(self, client, convs, dataset, proxy, json_schema):
        return decompose(client, convs, self.spec, json_schema, dataset.assistant)

    def describe(self) -> str:
        return f"particles: llm (k={self.spec.k} samples, plurality vote)"


PARTICLE_SOURCES: dict[str, type[UnitSource]] = {"llm": LLMParticles, "released": ReleasedParticles}


def released_decompositions(path: Path, convs: Sequence[Conversation]) -> dict[tuple[str, int], Decomposition]:
    """The authors' particles of ``convs``; a turn they have none for gets none (a warning says how many)."""
    ids = {c.conv_id for c in convs}
    decomps = from_released([r for r in load_released_particles(path) if r.conv_id in ids])
    missing = [(c.conv_id, t.turn_ind) for c in convs for t in c.evaluated_turns()
               if (c.conv_id, t.turn_ind) not in decomps]
    if missing:
        log.warning("%d assistant turns have no released particles (e.g. %s); they get none", len(missing), missing[0])
        for key in missing:
            decomps[key] = Decomposition(key[0], key[1], (), "released", fallback="no_released_particles")
    return decomps
