"""``face``: FACE on your own conversation logs, and the diagnostics report of a finished run.

    face evaluate LOGS [--aspects relevance,dialogue_overall] [--llm local] [--out DIR] [--yes] [--dry-run]
    face report RUN_DIR
    face compare RUN_A RUN_B [RUN_C ...]

Built on the Python API (``face.api``): its arguments become the run request ``face.evaluate`` sends to the runner
(``face.runner``): the same config, method, LLM layer, cache and exit codes as ``scripts/run.py
experiment=crsarena_main`` (0 done, 2 bad input, setting or missing API key, 3 budget, 4 LLM failure,
130 interrupted, 1 unexpected).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from face.comparison import cli as compare_cli  # issue 30: `face compare`
from face.errors import ConfigError
from face.files import dir_lock
from face.runner import guarded, run_cli

EVALUATE_HELP = """\
Evaluate your conversations with FACE: decompose every assistant turn into particles, score each particle
for each aspect with an LLM, aggregate to turn and dialogue scores, and write a diagnostics report.

LOGS is a JSON or JSON Lines file in one of these formats:
  chat format   one conversation per line (JSONL) or a JSON list of them:
                {"id": "c1", "system": "my-crs-v2", "messages": [{"role": "user", "content": "..."},
                                                             {"role": "assistant", "content": "..."}]}
                ("id" and "system" are optional; a conversation may also be a bare list of messages;
                 system messages are ignored; user and assistant messages must alternate; "content" may
                 also be OpenAI's list of parts [{"type": "text", "text": "..."}]: the text parts are
                 joined with a newline, any other part, e.g. image_url, is refused)
  CRSArena-Eval a JSON list of {"conv_id", "dialogue": [{"turn_ind", "role": "USER"|"ASST", "utterance"}]}
                (optionally "system" per conversation)
UTF-8, with or without a byte-order mark. Ids and system names are strings or integers (an integer is kept
as its digits: 0 is "0"); true/false, 1.5, NaN, Infinity, objects and lists are refused, as are empty or
blank messages and utterances and invalid Unicode (a lone \\ud800 escape): one line naming the file, the
conversation and the message, nothing written.

Writes to --out: run_file.json (the FACE authors' run-file format), particles.jsonl, particle_scores.jsonl
(every particle's score under every instruction, with raw samples), cost_estimate.csv, llm_usage.json,
conversations.json, report.html (every conversation -> turns -> particles, lowest scores highlighted) and
the report's tables as CSV.

The cost estimate is printed once, before anything is sent; above --confirm-above USD you are asked to confirm
(--yes skips the question). Every LLM answer is cached (data/cache/llm): rerunning resumes for free.
Progress bars go to stderr when it is a terminal (FACE_PROGRESS=0: none); the run ends with a summary block
(where the results are, MLflow run, wall time, LLM requests, cost as in llm_usage.json) and the report's path.
Large paid runs: --llm openai --set llm.batch=true sends the requests as OpenAI Batch API jobs (half price,
answers within 24 h; rerun the same command after an interruption to resume the same jobs).

--out belongs to one run at a time: rerunning the same LOGS with the same settings into it resumes that run;
a directory holding another run's results (another input or other settings) is refused unless --overwrite;
a second run into a directory still in use stops at once; an --out whose outputs would replace LOGS is refused.
Every file is written under a temporary name and renamed when complete: a stop never leaves half a file.
--set cannot name another output directory (paths.output_dir, report.out_dir: use --out) nor Hydra's own
settings (hydra.*, except hydra.searchpath), in any spelling (key, +key, ++key, ~key).

A backend that needs a key (--llm openai: OPENAI_API_KEY; any --set llm.api_key_env=NAME) stops with one line
naming the variable when it is unset, before anything is sent or written; --dry-run needs no key. The command
is built on the Python API (face.evaluate): the same checks, the same run.
"""



def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="face", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("evaluate", help="evaluate your conversation logs", description=EVALUATE_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("logs", type=Path, help="JSON / JSONL file of conversations (formats above)")
    e.add_argument("--aspects", default="relevance,interestingness,understanding,task_completion,interest_arousal,"
                   "efficiency,dialogue_overall", help="comma-separated aspects (default: all seven of CRSArena-Eval); "
                   "an empty, unknown or repeated name is refused")
    e.add_argument("--llm", default="local", help="LLM backend config: local (default, embedded, no key), openai, "
                   "openai_compatible, scripted (a fake server for tests), or any conf/llm/NAME.yaml")
    e.add_argument("--out", default=None, help="output directory (default: face-runs/<LOGS name>)")
    e.add_argument("--overwrite", action="store_true",
                   help="replace the results of another run (other logs or settings) in --out")
    e.add_argument("--yes", action="store_true", help="do not ask for confirmation, whatever the estimate")
    e.add_argument("--dry-run", action="store_true", help="print the cost estimate and stop (sends nothing)")
    e.add_argument("--confirm-above", type=float, default=1.0, metavar="USD",
                   help="ask before sending when the estimate exceeds this many US dollars (default 1.0)")
    e.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    e.add_argument("--mlflow", action="store_true", help="also log the run to MLflow (sqlite:///mlflow.db)")
    e.add_argument("--experiment", default=None, metavar="NAME",
                   help="with --mlflow: the MLflow experiment of the run (default face_evaluate)")
    e.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="any other setting, as for scripts/run.py (repeatable), e.g. --set "
                        "method.scoring.estimator=logprobs --set run_size=tiny --set "
                        "llm.base_url=http://gpu-box:8000/v1; a credential (a key, token or password setting, a "
                        "key-like value, user:pass@ in a URL) is refused: keep the key in the environment and name "
                        "its variable with --set llm.api_key_env=NAME")
    r = sub.add_parser("report", help="rebuild the diagnostics report of a finished run (no LLM call)",
                       description="Rebuild report.html and its tables from a finished `face evaluate` run "
                                   "directory (conversations.json, particles.jsonl, particle_scores.jsonl, "
                                   "run_file.json); sends nothing. A missing, empty, truncated or malformed "
                                   "file is one line naming it and its line, exit 2.")
    r.add_argument("run_dir", type=Path, help="the --out directory of a finished `face evaluate`")
    compare_cli.add_parser(sub)
    return p


def _aspect_names(text: str) -> list[str]:
    """``--aspects``: comma-separated aspect names, checked for their form (the names themselves by the dataset, with
    its ``dataset.aspects_file``, before anything runs). An empty list or an empty name between commas is one line
    and exit 2 (an empty list used to mean all seven)."""
    from face.datasets.crsarena import ASPECTS

    valid = f"valid: {', '.join(ASPECTS)}"
    names = [n.strip() for n in text.split(",")]
    if not any(names):
        raise ConfigError(f"--aspects {text!r} names no aspect: name at least one ({valid})")
    if not all(names):
        raise ConfigError(f"--aspects {text!r}: an empty name between commas ({valid})")
    return names


def evaluate(args: argparse.Namespace) -> int:
    """``face evaluate``: its arguments checked, then the API's evaluation (face.api.evaluation: the one run request,
    through face.runner) with its confirmation."""
    from face.api import evaluation

    if args.experiment is not None and not (args.mlflow and args.experiment.strip()):
        raise ConfigError(f"--experiment {args.experiment!r}: names the MLflow experiment of a run logged with "
                          "--mlflow (a name, with --mlflow)")
    confirm, aspects = _confirm(args), _aspect_names(args.aspects)
    out = args.out if args.out is not None else str(Path("face-runs") / args.logs.stem)
    done, _ = evaluation(str(args.logs), aspects, args.llm, out, overwrite=args.overwrite, limit=args.limit,
                         mlflow=args.mlflow, overrides=args.overrides, entry="cli", estimate_only=args.dry_run,
                         settings={"tracking.experiment_name": args.experiment} if args.experiment else None,
                         confirm=None if args.dry_run else confirm)
    if args.dry_run:
        print(f"Dry run (--dry-run): nothing was sent; the estimate is in {Path(out).resolve() / 'cost_estimate.csv'}")
    elif not done.sent:
        print("Nothing sent.")
    return 0


# face compare's options taken by one of its two modes only: given to the other mode they would be ignored, so they
# are refused
FIXED_ONLY = ("--by-system", "--pairing", "--n-boot", "--confidence", "--power", "--top", "--allow-incomparable",
              "--mlflow", "--tracking-uri")
SEQUENTIAL_ONLY = ("--llm", "--batch", "--max-conversations", "--method", "--yes", "--confirm-above", "--set")


def _given(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    """Those of ``flags`` (options of ``face compare``) given a value other than their default."""
    plain = vars(_parser().parse_args(["compare", "A", "B"]))  # every option at its default
    dests = {flag: "overrides" if flag == "--set" else flag[2:].replace("-", "_") for flag in flags}
    return [flag for flag, dest in dests.items() if getattr(args, dest) != plain[dest]]


def compare_sequential(args: argparse.Namespace) -> int:
    """``face compare A B --sequential``: the two logs scored until every aspect is decided (face.api.sequential)."""
    from face.api.sequential import compare_sequential as run

    if len(args.runs) != 2:
        raise ConfigError(f"--sequential compares two sets of logs, got {len(args.runs)}")
    confirm = _confirm(args)
    aspects = _aspect_names(args.aspects) if args.aspects is not None else None
    out = args.out if args.out is not None else str(compare_cli._default_out(args.runs))
    res = run(args.runs[0], args.runs[1], aspects, args.llm, out=out, names=compare_cli._names(args.names),
              batch=args.batch, max_conversations=args.max_conversations, seed=args.seed, alpha=args.alpha,
              target_diff=args.target_diff, method=args.method, overwrite=args.overwrite, overrides=args.overrides,
              entry="cli", confirm=confirm, echo=lambda line: print(line, flush=True))
    if res is None:
        print("Nothing sent.")
        return 0
    print(res.summary(), flush=True)
    print(f"\nReport: {(res.out / 'comparison' / 'report.html').resolve()}", flush=True)
    return 0


def _confirm(args: argparse.Namespace):
    """Asked with the estimate, before anything is sent: above --confirm-above USD (unless --yes), a terminal is asked;
    without one, the run is refused (rerun with --yes)."""
    if not math.isfinite(args.confirm_above) or args.confirm_above < 0:  # nan would never ask
        raise ConfigError(f"--confirm-above must be a number of USD >= 0, got {args.confirm_above}")

    def ask(cost: float) -> bool:
        if cost <= args.confirm_above or args.yes:
            return True
        if not sys.stdin.isatty():
            raise ConfigError(f"the estimate is ${cost:.2f} (above --confirm-above {args.confirm_above}); rerun "
                              "with --yes to send")
        return input(f"Send the requests (estimated ${cost:.2f})? [y/N] ").strip().lower() in ("y", "yes")

    return ask


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from face.api.result import build_report

    with guarded():  # every stop one line and an exit code, Ctrl-C too
        if args.command == "evaluate":
            return evaluate(args)
        if args.command == "compare":  # issue 30; --sequential: issue 43
            unused = _given(args, SEQUENTIAL_ONLY if not args.sequential else FIXED_ONLY)
            if unused:
                raise ConfigError(f"{', '.join(unused)}: not an option of face compare "
                                  f"{'without' if not args.sequential else 'with'} --sequential")
            return compare_sequential(args) if args.sequential else compare_cli.main(args)
        try:
            if not args.run_dir.is_dir():
                raise ValueError("not a directory")
            with dir_lock(args.run_dir, "RUN_DIR"):  # not while a run is writing there
                print(f"Report: {build_report(args.run_dir.resolve())}")
        except ConfigError:
            raise
        except (OSError, ValueError, KeyError) as e:  # DataError (a ValueError) names the file and the line
            raise ConfigError(f"cannot rebuild the report from {args.run_dir}: {e}") from None
    return 0


def entry() -> None:
    """The ``face`` console script: ``main`` run as a whole process (``face.runner.run_cli``: fewer garbage
    collections, no interpreter teardown at exit)."""
    run_cli(main)


if __name__ == "__main__":
    entry()
