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
from face.experiments.result import ExperimentResult
from face.report.tables import order_aspects, print_table, write_table
from face.tracking import summary_metrics

USAGE_KEYS = ("llm_requests", "llm_samples", "llm_http_requests", "llm_cache_hits", "llm_input_tokens",
              "llm_output_tokens", "llm_cost_usd")


def variant_cfg(cfg: DictConfig, overrides) -> DictConfig:
    """``cfg.method`` with a variant's overrides merged in."""
    return cast(DictConfig, OmegaConf.merge(OmegaConf.to_container(cfg.method, resolve=True),
                                            OmegaConf.to_container(overrides, resolve=True)))


def parts(cfg: DictConfig) -> Parts:
    """One method per variant (their names unique)."""
    names = [v.name for v in cfg.variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"variants: names must be unique, got {names}")
    return Parts(method_cfgs={v.name: variant_cfg(cfg, v.overrides) for v in cfg.variants})


def run(plan: Plan) -> ExperimentResult:
    cfg = plan.cfg
    with experiment(plan) as ctx:
        tracker = ctx.tracker
        rows, usage_rows, labels = [], [], {}
        for name, method in ctx.methods.items():
            out, res = ctx.predict_and_evaluate(name, method)
            labels[name] = out.label
            if res is not None:
                tracker.log_metrics(summary_metrics(res, f"{name}."))
                rows.append(res.assign(variant=name))
                usage_rows.append({"variant": name, **{k: out.metrics.get(k, 0.0) for k in USAGE_KEYS}})
        if not rows:
            print("Dry run: nothing was sent.", flush=True)
            return ctx.result(dry_run=True, labels=labels)
        results = order_aspects(pd.concat(rows, ignore_index=True))
        usage = pd.DataFrame(usage_rows)
        note = f"{ctx.subset}. Variants: " + " | ".join(f"{k}: {lab}" for k, lab in labels.items())
        wide = results[results["split"] == "all"].pivot_table(index=["level", "aspect", "coefficient"],
                                                                columns="variant", values="value").reset_index()
        paths = write_table(results, ctx.out_dir, "variants_correlations", f"{cfg.task_name}. {note}", digits=4)
        paths += write_table(wide, ctx.out_dir, "variants_side_by_side",
                             f"{cfg.task_name}, pooled splits, side by side. {note}")
        paths += write_table(usage, ctx.out_dir, "variants_llm_usage", f"LLM calls and tokens per variant. {note} "
                             "Calls served from the response cache are counted as cache hits.", digits=0)
        print_table(f"{cfg.task_name}, pooled splits. {note}", wide)
        print_table("LLM usage per variant", usage, digits=0)
        tracker.log_artifacts(paths, "results")
        return ctx.result(results=results, tables={"usage": usage}, labels=labels)
