"""What a live run will send and cost, before anything is sent: requests, samples, HTTP requests, tokens, price.

Pure counting from the planned prompts, with the LLM layer's arithmetic (face/llm/sizes.py: the same units and names
as llm_usage.json). A *sample* is one sampled completion (the paper counts those: 16 instructions × 5 samples ×
2.81 particles ≈ 225 scoring samples per aspect per assistant turn); a *request* asks for the n samples of one
prompt; an HTTP request carries up to ``llm.n_per_request`` of them. Input tokens are estimated at ~4 characters a
token, output tokens from typical answer sizes. Before the decomposition the particle count of a turn is not known:
a scoring stage then assumes a rate (``particles_per_turn``: the released particles' where they exist, else their
mean, 2.81) and says so; after it, ``Face`` states what the counts become at the actual rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Sequence

import pandas as pd

from face.data.schema import Conversation, Instruction
from face.llm.config import LLMConfig
from face.llm.sizes import Size, cost_usd, estimate_input_tokens, estimate_tokens, planned, planned_request
from face.pipeline.particles import Decomposition, decompose_messages
from face.pipeline.scoring import ScoringSpec, Unit, score_messages

COUNTS = ("requests", "samples", "http_requests", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class Pricing:
    """What the endpoint charges and how many samples one HTTP request can carry."""

    n_per_request: int = 1
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0

    @classmethod
    def of(cls, llm: LLMConfig) -> Pricing:
        """The pricing of an `llm` config as charged (`LLMConfig.prices`: the Batch API's discount included)."""
        return cls(llm.n_per_request, *llm.prices)

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, self.price_output_per_mtok)


@dataclass
class StageCost:
    stage: str
    assistant_turns: int
    units: int
    requests: int
    samples: int
    http_requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    particles_per_turn: float | None = None  # the particle rate a scoring stage assumed (None: known, or no particles)

    @classmethod
    def of(cls, stage: str, assistant_turns: int, units: int, size: Size, pricing: Pricing) -> StageCost:
        return cls(stage, assistant_turns, units, size.requests, size.samples, size.http_requests, size.input_tokens,
                   size.output_tokens, pricing.cost(size.input_tokens, size.output_tokens))

    @property
    def size(self) -> Size:
        return Size(*(getattr(self, k) for k in COUNTS))

    @property
    def samples_per_turn(self) -> float:
        return self.samples / max(self.assistant_turns, 1)


def decomposition_cost(convs: Sequence[Conversation], k: int, output_tokens: int, pricing: Pricing,
                       assistant: str = "movie-recommendation assistant", reasoning: bool = False) -> StageCost:
    turns = [(c, t) for c in convs for t in c.evaluated_turns()]
    size = sum((planned_request(decompose_messages(c, t, assistant, reasoning), k, pricing.n_per_request,
                                output_tokens) for c, t in turns), Size())
    return StageCost.of("decompose", len(turns), len(turns), size, pricing)


def scoring_cost(aspect: str, units: Sequence[Unit], instructions: Sequence[Instruction],
                 convs: dict[str, Conversation], n_turns: int, spec: ScoringSpec, output_tokens: int,
                 pricing: Pricing, judged: str = "conversational recommender systems") -> StageCost:
    """One request per unit × instruction (their prompts counted as the unit's without an instruction, plus the
    instruction: rendering every pair would cost as much as planning the run)."""
    base = sum(estimate_input_tokens(score_messages(u, convs[u.conv_id], "", judged, spec.reasoning)) for u in units)
    instr_tokens = sum(estimate_tokens(len(i.text)) for i in instructions)
    one_each = base * len(instructions) + instr_tokens * len(units)  # one HTTP request of every request
    size = planned(spec.samples, pricing.n_per_request, one_each, output_tokens,
                   requests=len(units) * len(instructions))
    return StageCost.of(f"score:{aspect}", n_turns, len(units), size, pricing)


def cost_table(stages: Sequence[StageCost]) -> pd.DataFrame:
    df = pd.DataFrame([{**asdict(s), "samples_per_turn": s.samples_per_turn} for s in stages])
    total = df[[*COUNTS, "cost_usd"]].sum()
    turns = df["assistant_turns"].max()
    rates = df["particles_per_turn"].dropna()
    df.loc[len(df)] = {"stage": "total", "assistant_turns": turns, "units": df["units"].sum(), **total.to_dict(),
                       "particles_per_turn": rates.iloc[0] if len(rates) and rates.nunique() == 1 else None,
                       "samples_per_turn": total["samples"] / max(turns, 1)}
    return df


def particles_per_turn(decomps: dict[tuple[str, int], Decomposition]) -> float:
    return sum(len(d.particles) for d in decomps.values()) / max(len(decomps), 1)


def scale_stage(stage: StageCost, factor: float, rate: float | None = None) -> StageCost:
    """A stage with ``factor`` times the units (requests, samples, tokens and cost follow): one unit per turn stood in
    for the particles a decomposition will produce, at ``rate`` particles a turn."""
    return replace(stage, units=round(stage.units * factor), **asdict(stage.size.scaled(factor)),
                   cost_usd=stage.cost_usd * factor, particles_per_turn=rate)


def totals(costs: pd.DataFrame, stages: str = "") -> Size:
    """The summed counts of a cost table's stages (those whose name starts with ``stages``; the total row left out)."""
    rows = costs[(costs["stage"] != "total") & costs["stage"].astype(str).str.startswith(stages)]
    return Size(*(int(rows[k].sum()) if k in rows else 0 for k in COUNTS))
