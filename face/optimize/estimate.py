"""What an optimization costs before anything is sent: LLM requests, samples and HTTP requests per round (gradients,
rewrites, scoring) and in total, with tokens and price, counted with the LLM layer's arithmetic (face/llm/sizes.py:
the units and names of llm_usage.json). Scoring counts are upper bounds: a (candidate, particle) pair scored once is
free afterwards (in-process memo and the LLM cache), which the loop exploits heavily."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import pandas as pd

from face.llm.sizes import planned
from face.optimize.config import OptimizerConfig
from face.pipeline.estimate import COUNTS, Pricing
from face.settings import conf_defaults

PAPER = ("alpha", "beta", "beam", "ucb_c", "expand_minibatch", "pull_minibatch")  # the loop's sizes the paper states
GRADIENT_TOKENS, REWRITE_TOKENS = (1800, 250), (500, 150)  # (input, output) tokens of one request


@dataclass(frozen=True)
class CostInputs:
    """Sizes of one aspect's data and prompts (tokens are estimates: ~4 characters per token)."""

    train_items: int
    eval_items: int  # dev + test items scored at the end
    particles_per_item: float
    score_samples: int  # samples per particle × instruction
    score_in_tokens: float  # input tokens of one scoring request
    score_out_tokens: int


def estimate(ocfg: OptimizerConfig, ci: CostInputs, pricing: Pricing) -> pd.DataFrame:
    """One row per stage: per round (gradients, rewrites, expand scoring, bandit pulls), all rounds, final
    evaluation, total."""
    b, a, be = ocfg.beam, ocfg.alpha, ocfg.beta
    pool = b + b * a * be
    units = ci.particles_per_item
    rows = []

    def row(stage: str, requests: float, samples_each: int = ci.score_samples, tin_each: float = ci.score_in_tokens,
            tout_each: int = ci.score_out_tokens) -> None:  # by default a scoring stage
        # expected counts (averages over rounds and pulls): fractional here, rounded once in the table below
        size = planned(samples_each, pricing.n_per_request, requests * tin_each, tout_each, requests)  # type: ignore[arg-type]
        rows.append({"stage": stage, **asdict(size), "cost_usd": pricing.cost(size.input_tokens, size.output_tokens)})

    row("gradients / round", b, a, *GRADIENT_TOKENS)
    row("rewrites / round", b * a, be, *REWRITE_TOKENS)
    row("expand scoring / round", b * min(ocfg.expand_minibatch, ci.train_items) * units)
    row("bandit pulls / round (upper bound)",
        min(ocfg.pulls * min(ocfg.pull_minibatch, ci.train_items), pool * ci.train_items) * units)
    total_round = pd.DataFrame(rows).drop(columns="stage").sum()
    rows.append({"stage": "per round", **total_round.to_dict()})
    rows.append({"stage": f"all {ocfg.rounds} rounds", **(total_round * ocfg.rounds).to_dict()})
    row("final evaluation (dev + test)", (min(ocfg.top_k, ocfg.rounds * pool) + 1) * ci.eval_items * units)
    total = pd.DataFrame(rows[-2:]).drop(columns="stage").sum()  # all rounds and the final evaluation
    rows.append({"stage": "total", **total.to_dict()})
    out = pd.DataFrame(rows)
    out[list(COUNTS)] = out[list(COUNTS)].round().astype(int)
    return out


def paper_setting(ocfg: OptimizerConfig) -> OptimizerConfig:
    """``ocfg`` with the paper's loop sizes: conf/optimizer/paper.yaml's values of ``PAPER``."""
    return replace(ocfg, **conf_defaults("optimizer/paper.yaml", PAPER))
