"""One LLM job, the same for live FACE, every LLM baseline and the instruction optimizer:

    plan -> estimate -> gate (write and print the estimate; refuse a run over llm.max_cost_usd; stop for a dry run)
         -> send (one client) -> collect -> usage (llm_usage.json, llm_server.json, MLflow metrics)

The estimate and the usage count the same units under the same names (face/llm/sizes.py: ``requests``, ``samples``,
``http_requests``, tokens); ``finish`` prints what was sent beside what was estimated (and, for a run whose particle
count was assumed, ``restate``d after the decomposition).

What a job plans, sends and collects is the caller's; the estimate table, the budget refusal, the dry run and the
usage artifacts exist here only.

    job = LLMJob(lcfg, run_dir, label)
    job.gate(costs)                      # ConfigError over budget; the estimate is in run_dir
    if job.dry_run:
        return job.dry_run_output()
    with job.client() as client:
        ...                              # send, collect
        job.finish(client)               # usage artifacts and metrics
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from face import console
from face.errors import ConfigError
from face.files import atomic_write_text
from face.llm import LLMClient, LLMConfig, make_client
from face.llm.sizes import Size
from face.methods import MethodOutput
from face.predictions import Predictions
from face.report.tables import print_table

COUNTS = ("requests", "samples", "http_requests", "input_tokens", "output_tokens")


def _total(costs: pd.DataFrame, column: str) -> float:
    """A cost table's ``column``: its ``total`` row, else the sum of its stages."""
    total = costs.loc[costs["stage"] == "total", column]
    return float(total.iloc[-1]) if len(total) else float(costs[column].sum())


def estimated_cost(costs: pd.DataFrame) -> float:
    """The run's estimated cost: the ``total`` row of a cost table, else the sum of its stages."""
    return _total(costs, "cost_usd")


def estimated_size(costs: pd.DataFrame) -> Size:
    """The run's estimated requests, samples, HTTP requests and tokens (the ``total`` row, else the stages' sum)."""
    return Size(*(int(round(_total(costs, k))) for k in COUNTS))


def _change(sent: int, estimated: int) -> str:
    return f"{(sent - estimated) / estimated:+.1%}" if estimated else "n/a"


@dataclass
class LLMJob:
    """The gate and the accounting of one LLM job, built once from the run's typed LLM settings."""

    lcfg: LLMConfig
    run_dir: Path
    label: str  # what the job is, with its LLM (the estimate's and the run's description)
    name: str = ""  # artifacts: cost_estimate[_name].csv, llm_usage[_name].json; metrics: [name.]llm_*
    artifacts: list[Path] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    estimated: Size | None = None  # what the gate's estimate said would be sent
    restated: Size | None = None  # the same, restated once the particle count was known
    # the run's console: the estimate and the usage go to its summary; "shown": the estimate was printed already
    summary: console.RunSummary = field(default_factory=console.RunSummary, repr=False)

    def _file(self, stem: str, ext: str) -> Path:
        return self.run_dir / (f"{stem}_{self.name}.{ext}" if self.name else f"{stem}.{ext}")

    @property
    def dry_run(self) -> bool:
        return bool(self.lcfg.dry_run)

    def gate(self, costs: pd.DataFrame, note: str = "", estimated_usd: float | None = None,
             detail: pd.DataFrame | None = None, size: Size | None = None) -> None:
        """Write and print the estimate; a ConfigError if it is over ``llm.max_cost_usd`` (unless ``llm.force`` or a
        dry run). ``estimated_usd``: the figure compared with the cap (default: the table's total); ``detail``: the
        table written to the run directory when the one printed is its summary (default: ``costs``); ``size``: the
        requests, samples and HTTP requests ``finish`` compares the usage with (default: the table's total)."""
        detail = costs if detail is None else detail
        self.artifacts.append(atomic_write_text(self._file("cost_estimate", "csv"), detail.to_csv(index=False)))
        self.summary.estimates.append(detail)
        self.estimated = estimated_size(costs) if size is None else size
        console.plan(self.estimated.requests)  # the run's progress line: the whole run's ETA
        estimated = estimated_cost(costs) if estimated_usd is None else estimated_usd
        self.metrics.update({f"{self._prefix}estimate.{k}": float(getattr(self.estimated, k))
                             for k in ("requests", "samples", "http_requests")})
        if self.lcfg.batch:
            note += (f" (OpenAI Batch API price: {self.lcfg.batch_price_factor:g} × list price "
                     f"${estimated / self.lcfg.batch_price_factor:.2f})")
        when = " (an estimate: nothing sent so far)" if self.dry_run else ""
        if self.summary.estimate != "shown":
            print_table(f"Cost estimate before sending anything{when}{note} — {self.label}", costs, 2)
        cap = self.lcfg.max_cost_usd
        if cap is not None and estimated > cap and not (self.lcfg.force or self.dry_run):
            raise ConfigError(f"llm.max_cost_usd={cap} is below the cost estimate ${estimated:.2f}: raise it, or "
                              "pass llm.force=true to start anyway (the estimate ignores cached samples, so a "
                              "resumed run may cost less; the budget still stops it)")

    @property
    def _prefix(self) -> str:
        return f"{self.name}." if self.name else ""

    def restate(self, assumed: Size, actual: Size, assumed_rate: float, actual_rate: float) -> None:
        """The estimate of the stages that depended on an assumed particle rate, once the actual rate is known: said
        on the console and in the metrics, and counted in what ``finish`` compares the usage with (after ``gate``)."""
        self.restated = Size(*(getattr(self.estimated, k) - getattr(assumed, k) + getattr(actual, k)
                               for k in COUNTS))
        console.plan(actual.requests - assumed.requests)
        print(f"{self._prefix}particles: {actual_rate:.3f} per turn (the estimate assumed {assumed_rate:.3f}); "
              f"scoring: {actual.http_requests:,} HTTP requests, {actual.samples:,} samples at the actual rate "
              f"(estimated: {assumed.http_requests:,}, {assumed.samples:,})")
        self.metrics.update({f"{self._prefix}estimate.particles_per_turn.assumed": assumed_rate,
                             f"{self._prefix}estimate.particles_per_turn.actual": actual_rate,
                             **{f"{self._prefix}estimate.at_actual_rate.{k}": float(getattr(self.restated, k))
                                for k in ("requests", "samples", "http_requests")}})

    def dry_run_output(self) -> MethodOutput:
        """A method's output for a dry run: no predictions, the estimate as its artifact and metrics."""
        return MethodOutput(Predictions.empty(), label=self.label + " — DRY RUN, nothing sent",
                            artifacts=list(self.artifacts), metrics=dict(self.metrics), dry_run=True)

    def client(self) -> LLMClient:
        """The one client of the job, a context manager (its server started and stopped with it)."""
        return make_client(self.lcfg)

    def finish(self, client) -> None:
        """The job's usage: llm_usage[_name].json, what the server says of the run (llm_server.json), metrics."""
        self.artifacts.append(client.usage.write_artifact(self._file("llm_usage", "json")))
        usage = client.usage.summary()
        self.summary.usage.append(usage)  # the run's summary block: the same numbers
        self.metrics.update(client.usage.mlflow_metrics(prefix=f"{self._prefix}llm_"))
        print(f"{self.name + ': ' if self.name else ''}{client.usage.counts_line()}")  # llm_usage.json's numbers
        # what was sent beside what was estimated, in the estimate's units (the estimate counts no cache hit)
        line = (f"{self._prefix}LLM sent: {usage['http_requests']:,} HTTP requests, {usage['samples']:,} samples "
                f"({usage['cache_hits']:,} samples from the cache)")
        for what, est in (("estimated", self.estimated), ("at the actual particle rate", self.restated)):
            if est is not None:
                line += (f"; {what}: {est.http_requests:,} ({_change(usage['http_requests'], est.http_requests)}), "
                         f"{est.samples:,} ({_change(usage['samples'], est.samples)})")
        print(line)
        report = getattr(client.server, "report", None)  # what the server says of the run (the replay judge's)
        got = report() if callable(report) else None
        if got:
            self.artifacts.append(atomic_write_text(self._file("llm_server", "json"),
                                                    json.dumps(got, indent=1, ensure_ascii=False) + "\n"))
            self.metrics.update({f"llm_server.{k}": float(v) for k, v in got.items()
                                 if isinstance(v, (int, float)) and not isinstance(v, bool)})
