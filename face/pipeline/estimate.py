"""What a live run will cost, before anything is sent: LLM calls, HTTP requests, tokens, price.

Pure counting from the planned prompts. A *call* is one sampled completion (the paper counts
those: 16 instructions × 5 samples × 2.83 particles ≈ 226 scoring calls per aspect per assistant
turn); an HTTP request may carry several samples when the endpoint returns n > 1 per request.
Input tokens are estimated at ~4 characters per token, output tokens from typical answer sizes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from face.data.schema import Conversation, Instruction
from face.llm.config import LLMConfig
from face.llm.usage import cost_usd, estimate_input_tokens, estimate_tokens
from face.pipeline.particles import Decomposition, decompose_messages
from face.pipeline.scoring import ScoringSpec, Unit, score_messages


@dataclass(frozen=True)
class Pricing:
    """What the endpoint charges and how many samples one HTTP request can carry."""

    n_per_request: int = 1
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0

    @classmethod
    def of(cls, llm: LLMConfig | Mapping[str, Any]) -> Pricing:
        """The pricing of an `llm` config as charged (`LLMConfig.prices`: the Batch API's discount included)."""
        cfg = llm if isinstance(llm, LLMConfig) else LLMConfig.from_dict(llm)
        return cls(cfg.n_per_request, *cfg.prices)

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return cost_usd(input_tokens, output_tokens, self.price_input_per_mtok, self.price_output_per_mtok)


@dataclass
class StageCost:
    stage: str
    assistant_turns: int
    units: int
    calls: int
    http_requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float

    @property
    def calls_per_turn(self) -> float:
        return self.calls / max(self.assistant_turns, 1)


def decomposition_cost(convs: Sequence[Conversation], k: int, output_tokens: int, pricing: Pricing,
                       assistant: str = "movie-recommendation assistant", reasoning: bool = False) -> StageCost:
    turns = [(c, t) for c in convs for t in c.evaluated_turns()]
    http = math.ceil(k / pricing.n_per_request)
    tin = sum(estimate_input_tokens(decompose_messages(c, t, assistant, reasoning)) for c, t in turns) * http
    tout = len(turns) * k * output_tokens
    return StageCost("decompose", len(turns), len(turns), len(turns) * k, len(turns) * http, tin, tout,
                     pricing.cost(tin, tout))


def scoring_cost(aspect: str, units: Sequence[Unit], instructions: Sequence[Instruction],
                 convs: dict[str, Conversation], n_turns: int, spec: ScoringSpec, output_tokens: int,
                 pricing: Pricing, judged: str = "conversational recommender systems") -> StageCost:
    http_per = math.ceil(spec.samples / pricing.n_per_request)
    base = sum(estimate_input_tokens(score_messages(u, convs[u.conv_id], "", judged, spec.reasoning)) for u in units)
    instr_tokens = sum(estimate_tokens(len(i.text)) for i in instructions)
    tin = (base * len(instructions) + instr_tokens * len(units)) * http_per
    calls = len(units) * len(instructions) * spec.samples
    tout = calls * output_tokens
    return StageCost(f"score:{aspect}", n_turns, len(units), calls, len(units) * len(instructions) * http_per,
                     tin, tout, pricing.cost(tin, tout))


def cost_table(stages: Sequence[StageCost]) -> pd.DataFrame:
    df = pd.DataFrame([{**asdict(s), "calls_per_turn": s.calls_per_turn} for s in stages])
    total = df[["calls", "http_requests", "input_tokens", "output_tokens", "cost_usd"]].sum()
    df.loc[len(df)] = {"stage": "total", "assistant_turns": df["assistant_turns"].max(), "units": df["units"].sum(),
                       **total.to_dict(), "calls_per_turn": total["calls"] / max(df["assistant_turns"].max(), 1)}
    return df


def particles_per_turn(decomps: dict[tuple[str, int], Decomposition]) -> float:
    return sum(len(d.particles) for d in decomps.values()) / max(len(decomps), 1)


def scale_stage(stage: StageCost, factor: float) -> StageCost:
    """A stage with ``factor`` times the units (calls, requests, tokens and cost follow): one unit per turn
    stood in for the particles a decomposition will produce."""
    return StageCost(stage.stage, stage.assistant_turns, round(stage.units * factor), round(stage.calls * factor),
                     round(stage.http_requests * factor), round(stage.input_tokens * factor),
                     round(stage.output_tokens * factor), stage.cost_usd * factor)
