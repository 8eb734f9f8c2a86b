"""Several method variants on the same data, side by side: correlations and LLM cost per variant.

``cfg.variants`` is a list of ``{name, overrides}``; ``overrides`` are merged into ``cfg.method``.
Used by ablation_scoring (sampling n = 1 / 5 / 20 vs logprobs) and ablation_particles_source.
The response cache makes shared work free: n = 20 reuses the samples of n = 5 and n = 1.
"""

from __future__ import annotations

from typing import cast

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.experiments.common import ConfigError, Parts, Plan, experiment
from face.experiments.result import ExperimentResult, Table
from face.report.tables import order_aspects

USAGE_KEYS = ("llm_requests", "llm_samples", "llm_http_requests", "llm_cache_hits", "llm_input_tokens",
              "llm_output_tokens", "llm_cost_usd")


def parts(cfg: DictConfig) -> Parts:
    """One method per variant (their names unique): ``cfg.method`` with the variant's overrides merged in."""
    names = [v.name for v in cfg.variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"variants: names must be unique, got {names}")
    method = OmegaConf.to_container(cfg.method, resolve=True)
    return Parts(method_cfgs={v.name: cast(DictConfig, OmegaConf.merge(method, OmegaConf.to_container(
        v.overrides, resolve=True))) for v in cfg.variants})


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        outs = {name: ctx.predict(method) for name, method in ctx.methods.items()}
        if any(out.dry_run for out in outs.values()):
            return ctx.result(dry_run=True, outputs=outs)
        corr = {name: ctx.evaluate(out.predictions) for name, out in outs.items()}
        results = order_aspects(pd.concat([res.assign(variant=name) for name, res in corr.items()], ignore_index=True))
        usage = pd.DataFrame([{"variant": name, **{k: out.metrics.get(k, 0.0) for k in USAGE_KEYS}}
                              for name, out in outs.items()])
        note = f"{ctx.subset}. Variants: " + " | ".join(f"{k}: {out.label}" for k, out in outs.items())
        wide = results[results["split"] == "all"].pivot_table(index=["level", "aspect", "coefficient"],
                                                                columns="variant", values="value").reset_index()
        return ctx.result(
            outputs=outs, results=results, correlations={f"{k}.": v for k, v in corr.items()},
            tables={"variants_correlations": Table(results, f"{cfg.task_name}. {note}", 4),
                    "variants_side_by_side": Table(wide, f"{cfg.task_name}, pooled splits, side by side. {note}"),
                    "variants_llm_usage": Table(usage, f"LLM calls and tokens per variant. {note} Calls served from "
                                                       "the response cache are counted as cache hits.", 0)},
            shown=[(f"{cfg.task_name}, pooled splits. {note}", wide), ("LLM usage per variant", usage, 0)])
