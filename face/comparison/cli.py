"""Is version B better than version A? Compare two or more FACE runs of the same judge: per aspect, each system's
mean with its 95 % bootstrap interval (conversations resampled within each system), and per pair the difference
candidate − baseline (later run − earlier run) with its interval and p-value -- paired when the runs share
conversation ids (the same test set or simulator seeds), unpaired otherwise -- Holm's correction over aspects ×
pairs, and a verdict: better / worse / no detectable difference (never "equal": see the smallest detectable
difference, and --target-diff for how many conversations would be needed). With three runs or more: a ranking
with rank intervals and P(X beats Y). What moved: the dialogue acts and particles whose scores changed most, and
the conversations that got worse, linked into each run's diagnostics report.

RUN is a `face evaluate` output directory, an experiment run directory (outputs/NAME/<time>), a run file
(run_file.json, the FACE authors' format) or an MLflow run id (mlflow:<id>; the store: --tracking-uri).
Runs scored by different judge LLMs, instruction sets or estimators, or on different aspects or scales, are
refused (their scores are not on one scale); --allow-incomparable compares them anyway, with a warning on
every table.

Writes to --out: verdicts, means, differences, systems (ranking, beats with three runs or more) and moved_* as
.md / .csv / .tex, figures/*.png, report.html. --out belongs to one comparison, as a `face evaluate` --out to one
run: the same comparison again replaces its files, another run's or comparison's results there are refused unless
--overwrite, a compared run's directory and the project's results/ always. --mlflow also records the comparison
as an MLflow run (experiment face_compare, its artifacts beside the store): the compared runs, every difference as
a metric, the outputs as artifacts.
"""

# ``face.cli`` hooks this in (``add_parser(sub)`` while building its parser, ``main(args)`` when the command is
# ``compare``, inside ``face.runner.guarded``). Exit codes as the rest of the command: 0 done, 2 a bad input or
# setting (one ``error:`` line; nothing written), 130 interrupted, 1 an unexpected error. The module docstring is
# the command's --help text.

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``compare`` subcommand on ``face``'s parser."""
    p = sub.add_parser("compare", help="is version B better than version A? runs compared with statistics",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="two or more runs: baseline first")
    p.add_argument("--names", help="comma-separated names for the runs (default: directory or file names)")
    p.add_argument("--by-system", action="store_true",
                   help="one system per `system` of the runs' conversations (e.g. one run of several CRSs)")
    p.add_argument("--aspects", default=None, help="comma-separated aspects (default: every aspect all runs score)")
    p.add_argument("--pairing", default="auto", choices=["auto", "paired", "unpaired"],
                   help="auto (default): paired when the runs share at least half their conversation ids")
    p.add_argument("--target-diff", type=float, default=None, metavar="D",
                   help="also say how many conversations per system would detect a difference of D")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)")
    p.add_argument("--power", type=float, default=0.8, help="power for the smallest detectable difference (0.8)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples (default: enough for Holm over "
                                                             "every test, at least 10000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    p.add_argument("--top", type=int, default=5, help="rows per aspect in 'what moved' (default 5)")
    p.add_argument("--out", default=None, help="output directory (default: face-runs/compare_<A>_vs_<B>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace another run's or comparison's results in --out")
    p.add_argument("--allow-incomparable", action="store_true",
                   help="compare runs of different judges, instructions, estimators or scales (warned on every "
                        "table)")
    p.add_argument("--mlflow", action="store_true", help="record the comparison as an MLflow run")
    q = p.add_argument_group("sequential (--sequential: RUN_A RUN_B are conversation logs, scored until decided)")
    q.add_argument("--sequential", action="store_true",
                   help="score the two sets of logs (files as `face evaluate` reads them) with FACE in a seeded "
                        "random order, a batch of each at a time, until every aspect is decided "
                        "(docs/comparing_systems.md)")
    q.add_argument("--llm", default="local", help="the judge's LLM backend config, as for `face evaluate`")
    q.add_argument("--batch", type=int, default=5, help="conversations of each side per step (default 5)")
    q.add_argument("--max-conversations", type=int, default=None, metavar="N",
                   help="score at most N conversations of each side")
    q.add_argument("--method", default="betting", choices=["betting", "eb", "asymptotic"],
                   help="the confidence sequence (default betting: exact for bounded scores)")
    q.add_argument("--yes", action="store_true", help="do not ask for confirmation, whatever the estimate")
    q.add_argument("--confirm-above", type=float, default=1.0, metavar="USD",
                   help="ask before sending when the estimate of scoring everything exceeds this (default 1.0)")
    q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="any setting of the scoring run, as for `face evaluate` (e.g. llm.max_cost_usd=5)")
    p.add_argument("--tracking-uri", default=None, help="MLflow store (default: sqlite:///<project>/mlflow.db)")
    return p


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",")]


def _default_out(runs: list[str]) -> Path:
    from face.secrets import redact

    stems = [re.sub(r"[^\w.-]+", "_", redact(Path(r.rstrip("/")).name or r))[:40] for r in runs]
    return Path("face-runs") / f"compare_{'_vs_'.join(stems)}"[:120]


def main(args: argparse.Namespace) -> int:
    """Run ``face compare``: load, check, compare, write, print. A bad input or setting is a ConfigError / DataError
    before anything is written (``face.cli`` makes it one line and exit 2)."""
    from face.comparison.engine import Options, compare
    from face.comparison.report import write_all
    from face.errors import require_writable_dir

    out = args.out if args.out is not None else _default_out(args.runs)
    require_writable_dir(out, "--out")  # an empty one too
    out = Path(out)
    comp = compare(*args.runs, names=_names(args.names), by_system=args.by_system, aspects=_names(args.aspects),
                   allow_incomparable=args.allow_incomparable, tracking_uri=args.tracking_uri,
                   **{f.name: getattr(args, f.name) for f in dataclasses.fields(Options)})  # each option's flag
    if args.mlflow:  # the names as MLflow keys and the store, checked before anything is written
        from face.comparison.mlflow_io import comparison_metrics, log_comparison, tracking
        from face.comparison.runs import default_tracking_uri

        uri = args.tracking_uri or default_tracking_uri()
        comparison_metrics(comp)
        tracking(uri)
    write_all(comp, out, args.overwrite, "--out")
    print(comp.summary(), flush=True)
    print(f"\nReport: {(out / 'report.html').resolve()}", flush=True)
    if args.mlflow:
        print(f"MLflow run: {log_comparison(comp, out, uri)}", flush=True)
    return 0
