"""``face``: FACE on your own conversation logs, and the diagnostics report of a finished run.

    face evaluate LOGS [--aspects relevance,dialogue_overall] [--llm local] [--out DIR] [--yes] [--dry-run]
    face report RUN_DIR
    face compare RUN_A RUN_B [RUN_C ...]

A thin layer over the experiments (``scripts/run.py experiment=crsarena_main``): the same config, method,
LLM layer, cache and exit codes (0 done, 2 bad input or setting, 3 budget, 4 LLM failure, 130 interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from pathlib import Path

from face.api import OUTPUTS, hydra_value

ROOT = Path(__file__).resolve().parents[1]

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
(where the results are, MLflow run, wall time, LLM calls, cost as in llm_usage.json) and the report's path.
Large paid runs: --llm openai --set llm.batch=true sends the requests as OpenAI Batch API jobs (half price,
answers within 24 h; rerun the same command after an interruption to resume the same jobs).

--out belongs to one run at a time: rerunning the same LOGS with the same settings into it resumes that run;
a directory holding another run's results (another input or other settings) is refused unless --overwrite;
a second run into a directory still in use stops at once; an --out whose outputs would replace LOGS is refused.
Every file is written under a temporary name and renamed when complete: a stop never leaves half a file.
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
    e.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="any other setting, as for scripts/run.py (repeatable), e.g. --set method.estimator=logprobs "
                        "--set run_size=tiny --set llm.base_url=http://gpu-box:8000/v1; a credential (a key, token or "
                        "password setting, a key-like value, user:pass@ in a URL) is refused: keep the key in the "
                        "environment and name its variable with --set llm.api_key_env=NAME")
    r = sub.add_parser("report", help="rebuild the diagnostics report of a finished run (no LLM call)",
                       description="Rebuild report.html and its tables from a finished `face evaluate` run "
                                   "directory (conversations.json, particles.jsonl, particle_scores.jsonl, "
                                   "run_file.json); sends nothing. A missing, empty, truncated or malformed "
                                   "file is one line naming it and its line, exit 2.")
    r.add_argument("run_dir", type=Path, help="the --out directory of a finished `face evaluate`")
    from face.comparison.cli import add_parser as add_compare  # issue 30: `face compare`

    add_compare(sub)
    return p


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _aspect_names(text: str, known=None, aliases=None) -> list[str]:
    """``--aspects``: comma-separated aspect names (or aliases) of ``known`` (the dataset's: CRSArena-Eval's seven,
    plus those of ``dataset.aspects_file``; None: check the list's form only). An empty list, an empty name
    between commas, an unknown or a repeated name is one line and exit 2 (an empty list used to mean all seven)."""
    from face.datasets.crsarena import ASPECT_ALIASES, ASPECTS
    from face.runner import EXIT_CONFIG, fail

    aliases = ASPECT_ALIASES if aliases is None else aliases
    valid = f"valid: {', '.join(known if known is not None else ASPECTS)}"
    names = [n.strip() for n in text.split(",")]
    if not any(names):
        fail(EXIT_CONFIG, f"error: --aspects {text!r} names no aspect: name at least one ({valid})")
    if not all(names):
        fail(EXIT_CONFIG, f"error: --aspects {text!r}: an empty name between commas ({valid})")
    canon = [aliases.get(n, n) for n in names]
    unknown = [n for n, c in zip(names, canon) if known is not None and c not in known]
    if unknown:
        fail(EXIT_CONFIG, f"error: --aspects: unknown aspect {unknown[0]!r} ({valid}; aliases: "
                          f"{', '.join(aliases)}; an aspect of your own: --set dataset.aspects_file=FILE)")
    twice = sorted({c for c in canon if canon.count(c) > 1})
    if twice:
        fail(EXIT_CONFIG, f"error: --aspects: {', '.join(twice)} named twice")
    return canon


def evaluate(args: argparse.Namespace) -> int:
    from face.datasets.chatlogs import load_logs
    from face.errors import ConfigError, require_writable_dir
    from face.files import dir_lock, refuse_input_overwrite
    from face.runner import EXIT_CONFIG, fail

    if not math.isfinite(args.confirm_above) or args.confirm_above < 0:  # nan would never ask
        fail(EXIT_CONFIG, f"error: --confirm-above must be a number of USD >= 0, got {args.confirm_above}")
    if args.limit is not None and args.limit < 1:  # 0 would mean all of them
        fail(EXIT_CONFIG, f"error: --limit must be a positive number of conversations, got {args.limit}")
    aspects = _aspect_names(args.aspects)  # its form; the names once the dataset (and its aspects file) is known
    if args.out is not None and not args.out.strip():
        fail(EXIT_CONFIG, "error: --out: the path is empty")
    logs = args.logs.resolve()
    try:
        convs = load_logs(logs)  # bad logs: one line, before anything is written
    except Exception as e:
        fail(EXIT_CONFIG, f"error: {e}")
    out = Path(os.path.abspath(args.out or Path("face-runs") / logs.stem))
    try:
        refuse_input_overwrite(out, [logs], OUTPUTS, "--out")
        require_writable_dir(out, "--out")
    except ConfigError as e:
        fail(EXIT_CONFIG, f"error: {e}")
    out = out.resolve()
    overrides = ["experiment=crsarena_main", "dataset=chat_logs", f"dataset.path={hydra_value(str(logs))}",
                 f"aspects=[{','.join(map(hydra_value, aspects))}]", f"llm={args.llm}",
                 f"paths.output_dir={hydra_value(str(out))}", f"report.out_dir={hydra_value(str(out))}",
                 *([] if args.mlflow else ["tracking=none"]), *([f"dataset.limit={args.limit}"] if args.limit else []),
                 *args.overrides]
    from face.secrets import secret_in_overrides, secret_setting

    bad = secret_in_overrides(args.overrides)  # a credential in --set: refused before anything is composed or written
    if bad:
        fail(EXIT_CONFIG, f"error: {bad}")
    try:
        cfg = _compose(overrides)
    except Exception as e:
        fail(EXIT_CONFIG, f"error: bad setting: {str(e).strip().splitlines()[0]}")
    bad = secret_setting(cfg)  # ... or in a config file (conf/llm/NAME.yaml) or a nested value (llm.headers)
    if bad:
        fail(EXIT_CONFIG, f"error: {bad}")
    from face.methods import build

    try:
        dataset = build(cfg.dataset)  # CRSArena-Eval's aspects, and those of dataset.aspects_file
    except ValueError as e:
        fail(EXIT_CONFIG, f"error: {e}")
    _aspect_names(args.aspects, dataset.aspects, dataset.aliases)
    existed = out.exists()
    try:
        with dir_lock(out, "--out"):  # held until the report is written: one run in --out at a time
            return _evaluate_in(out, cfg, convs, args)
    except ConfigError as e:
        fail(EXIT_CONFIG, f"error: {e}")
    except SystemExit:
        with contextlib.suppress(OSError):
            if not existed:
                out.rmdir()  # refused before anything was written: leave no empty directory
        raise


def _evaluate_in(out: Path, cfg, convs, args: argparse.Namespace) -> int:
    """The run, in its locked --out: ownership, the estimate (and confirmation), the run, the report."""
    from omegaconf import OmegaConf

    from face.datasets.crsarena import write_conversations
    from face.experiments.common import run_owner
    from face.files import claim_state
    from face.runner import EXIT_CONFIG, fail, run_guarded

    state = claim_state(out, run_owner(cfg), "--out", args.overwrite, OUTPUTS)
    if state == "resume":
        print(f"Resuming the run in {out} (same logs and settings; finished LLM calls come from the cache).")
    elif state == "overwrite":
        print(f"Overwriting another run's results in {out} (--overwrite).")
    from face.methods.job import estimate_console

    dry = OmegaConf.merge(cfg, {"llm": {"dry_run": True}, "tracking": {"enabled": False}})
    from face import console

    with estimate_console("estimate"), console.silenced():
        run_guarded(dry)  # prints the estimate, writes cost_estimate.csv, sends nothing
    if args.dry_run:
        print(f"Dry run (--dry-run): nothing was sent; the estimate is in {out / 'cost_estimate.csv'}")
        return 0
    import pandas as pd

    cost = float(pd.read_csv(out / "cost_estimate.csv")["cost_usd"].iloc[-1])
    if cost > args.confirm_above and not args.yes:
        if not sys.stdin.isatty():
            fail(EXIT_CONFIG, f"error: the estimate is ${cost:.2f} (above --confirm-above {args.confirm_above}); "
                              "rerun with --yes to send")
        if input(f"Send the requests (estimated ${cost:.2f})? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing sent.")
            return 0
    with estimate_console("shown"), console.held() as summaries:  # the estimate above is this run's: shown once
        run_guarded(cfg)
    write_conversations(convs[: args.limit] if args.limit else convs, out / "conversations.json")
    path = build_report(out)
    for summary in summaries:  # the run's summary block, its report last
        summary.extra.append(("Report", str(path)))
        print(summary.text(), flush=True)
    if not summaries:
        print(f"Report: {path}")
    return 0


REPORT_INPUTS = ("conversations.json", "particle_scores.jsonl", "run_file.json")  # particles.jsonl: optional


def build_report(run_dir: Path) -> Path:
    """report.html + tables from a finished run directory (no LLM). Every input is read through the checking
    readers: a missing, empty, truncated or hand-broken file is one DataError naming it (and its line)."""
    from face.datasets.crsarena import load_conversations
    from face.datasets.face_released import load_released_particles
    from face.errors import DataError
    from face.pipeline.records import read_score_file
    from face.report import diagnostic_report as diagnostics
    from face.runfile import read_run_file

    if not run_dir.is_dir():
        raise DataError(run_dir, "not a directory (the --out directory of a finished `face evaluate`)")
    for name in REPORT_INPUTS:
        if not (run_dir / name).exists():
            raise DataError(run_dir / name, "missing: not the directory of a finished `face evaluate` run")
    convs = load_conversations(run_dir / "conversations.json", require_labels=False, allow_empty_utterances=False)
    scores = read_score_file(run_dir / "particle_scores.jsonl")
    particles = {}
    if (run_dir / "particles.jsonl").exists():
        particles = {(t.conv_id, t.turn_ind): t.particles
                     for t in load_released_particles(run_dir / "particles.jsonl")}
    preds = read_run_file(run_dir / "run_file.json")
    settings = diagnostics.read_run_settings(run_dir / "run_settings.json")
    return diagnostics.write_report(run_dir / "report.html", run_dir / "report_tables", run_dir.name, convs,
                                    scores, particles, preds, settings)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
    args = _parser().parse_args(argv)
    if args.command == "evaluate":
        return evaluate(args)
    if args.command == "compare":  # issue 30
        from face.comparison.cli import main as compare_main

        return compare_main(args)
    from face.errors import ConfigError
    from face.files import dir_lock
    from face.runner import EXIT_CONFIG, fail

    try:
        if not args.run_dir.is_dir():
            raise ValueError("not a directory")
        with dir_lock(args.run_dir, "RUN_DIR"):  # not while a run is writing there
            print(f"Report: {build_report(args.run_dir.resolve())}")
    except ConfigError as e:
        fail(EXIT_CONFIG, f"error: {e}")
    except (OSError, ValueError, KeyError) as e:  # DataError (a ValueError) names the file and the line
        fail(EXIT_CONFIG, f"error: cannot rebuild the report from {args.run_dir}: {e}")
    return 0


def entry() -> None:
    """The ``face`` console script: ``main`` run as a whole process (``face.runner.run_cli``: fewer garbage
    collections, no interpreter teardown at exit)."""
    from face.runner import run_cli

    run_cli(main)


if __name__ == "__main__":
    entry()
