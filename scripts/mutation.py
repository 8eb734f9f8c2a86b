"""Mutation testing of the modules whose numbers reach the published tables, and of those that guard money and
bookkeeping (the request arithmetic, the cost estimate, the budget and usage, the cache and its cross-process
claims, the batch driver, the draw-until-valid loop, what a score record counts, the score records): does each
module's own test suite notice when its code is subtly wrong?

Two kinds of mutant, each made in a scratch copy of the package. *Operator* mutants are one small change to one
line -- a comparison flipped (< to <=, == to !=), an arithmetic operator swapped (+ to -, * to /), a number off by
one, `and` to `or`, a `not` dropped, a rounding dropped, the first two arguments of a call swapped -- made with
Python's own `ast` module. *Semantic* mutants are hand-written changes of meaning (scripts/mutants_semantic.py: a
wrong multiplier, a wrong unit, the last value for the largest, a boundary of a redraw rule, the resampling unit);
one whose source text no longer occurs is reported as STALE, never skipped in silence. The module's test files then
run (`pytest -x`); the mutant is killed when they fail. A survivor is either a missing test or an
equivalent mutant (the same behaviour written differently); `scripts/mutation_equivalent.txt` lists the ones
judged equivalent, each with its reason, and they are left out of the score. Its entries name module lines: after
an edit of a module the script reports entries that no longer match a mutant (rerun `--list` to place them).

    .venv/bin/python scripts/mutation.py                     # every target (see docs/testing.md for the time)
    .venv/bin/python scripts/mutation.py --only metaeval     # one target
    .venv/bin/python scripts/mutation.py --only llm/usage --jobs 1   # one at a time (a shared machine)
    .venv/bin/python scripts/mutation.py --list              # the mutants, without running anything

Prints one line per survivor (module:line, the change) and the score: killed / (mutants − equivalent).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import copy
import os
import queue
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# module -> (the functions mutated, or None for all; the test files that are its own)
LIVE_PIPELINE = ("tests/test_decomposition.py", "tests/test_scoring.py", "tests/test_scoring_plan.py",
                 "tests/test_live_experiments.py")  # the parts of the live pipeline and its experiments
TARGETS: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = {
    "pipeline/aggregate": (None, ("tests/test_aggregate.py",)),
    "metaeval": (None, ("tests/test_metaeval.py",)),
    "significance": (None, ("tests/test_significance.py",)),
    "runfile": (None, ("tests/test_runfile.py",)),
    "pipeline/estimators": (("score_value", "reasoned_value", "reasoned_expectation", "SamplingEstimator",
                             "LogprobsEstimator"), ("tests/test_money_records.py", *LIVE_PIPELINE,
                                                    "tests/test_fidelity.py")),
    "pipeline/scoring": (None, (*LIVE_PIPELINE, "tests/test_fidelity.py", "tests/test_streaming.py",
                                "tests/test_settings.py")),  # its settings' defaults, bounds and refusals
    # the money and bookkeeping paths (+ hand-written semantic mutants: scripts/mutants_semantic.py)
    "llm/sizes": (None, ("tests/test_money_estimate.py", "tests/llm/test_budget.py", "tests/llm/test_money_usage.py",
                         "tests/test_settings.py")),  # usage read from a reply; the memory bound of a setting
    "pipeline/estimate": (None, ("tests/test_money_estimate.py",)),
    "llm/usage": (("Piece", "Usage.worst_case", "Usage.must_wait", "Usage.reserve", "Usage.settle", "Usage.release",
                   "Usage.add", "Usage.summary"),
                  ("tests/llm/test_money_usage.py", "tests/llm/test_budget.py")),
    "llm/budget": (("BudgetLM.chat", "BudgetLM._send", "AccountingLM"),
                   ("tests/llm/test_money_usage.py", "tests/llm/test_budget.py")),
    "llm/cache": (("request_keys", "CachingLM.keys_for", "CachingLM._cached", "CachingLM._sample", "CachingLM.results",
                   "CachingLM.chat", "CachingLM._fetch", "_payload"),
                  ("tests/llm/test_money_draws.py", "tests/llm/test_cache_compat.py")),
    "llm/claims": (None, ("tests/test_shared_cache.py", "tests/llm/test_money_draws.py")),
    "llm/stream": (None, ("tests/test_streaming.py",)),
    "llm/validating": (None, ("tests/llm/test_money_draws.py",)),
    "llm/base": (("Draws.room",), ("tests/llm/test_money_draws.py",)),
    "pipeline/records": (("ScoreSink.add", "ScoreSink.take", "ScoreTally", "AspectScores", "per_conversation",
                          "read_score_file"), ("tests/test_money_records.py", "tests/test_records_stream.py")),
    # face compare's decision layer (issue 43): what it tests, its verdict, its sizing, its checks on real data
    "comparison/engine": (("_mode", "_Engine", "verdicts"), ("tests/test_compare_verdict.py",
                                                             "tests/test_compare_stats.py", "tests/test_compare.py")),
    "comparison/stats": (None, ("tests/test_compare_stats.py", "tests/test_compare_verdict.py")),
    "comparison/validation": (("arena_tests", "checked_by", "agreement", "agreement_summary", "_halves",
                               "_split_tests", "calibration"), ("tests/test_compare_verdict.py",)),
}

_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
        ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}


@dataclass(frozen=True)
class Mutant:
    module: str
    index: int  # its place in the walk of the module's tree (the same on every run of the same source)
    line: int
    change: str

    @property
    def key(self) -> str:
        return f"{self.module}:{self.line}: {self.change}"


def _in_targets(tree: ast.Module, names: tuple[str, ...] | None) -> set[int]:
    """ids of the nodes inside the functions / classes to mutate (every node when ``names`` is None)."""
    keep: set[int] = set()
    for node in tree.body:
        if names is None or (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names):
            keep.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.ClassDef):  # "Class.method": one method of a class
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and f"{node.name}.{item.name}" in names:
                    keep.update(id(n) for n in ast.walk(item))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef, ast.Module))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return keep - docstrings


def _changes(node: ast.AST) -> list[tuple[str, Any]]:
    """(description, apply) for every mutation of this one node; apply edits a copy of the node in place."""
    out = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _CMP:
                new = _CMP[type(op)]
                out.append((f"{type(op).__name__} -> {new.__name__}",
                            lambda n, i=i, new=new: n.ops.__setitem__(i, new())))
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        new = _BIN[type(node.op)]
        out.append((f"{type(node.op).__name__} -> {new.__name__}", lambda n, new=new: setattr(n, "op", new())))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        out.append((f"{type(node.op).__name__} -> {new.__name__}", lambda n, new=new: setattr(n, "op", new())))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("not dropped", "unwrap"))
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
        out.append((f"{node.value!r} -> {node.value + 1!r}", lambda n: setattr(n, "value", n.value + 1)))
    elif isinstance(node, ast.Call):
        out.extend(_call_changes(node))
    return out


def _call_changes(node: ast.Call) -> list[tuple[str, Any]]:
    """A rounding dropped; the first two arguments of a call swapped."""
    out: list[tuple[str, Any]] = []
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name == "round":
        out.append(("rounding dropped", "unround"))
    if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        out.append((f"{name or 'call'}: first two arguments swapped",
                    lambda n: n.args.__setitem__(slice(0, 2), [n.args[1], n.args[0]])))
    return out


def mutants_of(module: str) -> tuple[str, list[tuple[Mutant, str]]]:
    """The module's source and every (mutant, mutated source)."""
    names, _ = TARGETS[module]
    path = ROOT / "face" / f"{module}.py"
    source = path.read_text()
    tree = ast.parse(source)
    keep = _in_targets(tree, names)
    nodes = [n for n in ast.walk(tree) if id(n) in keep]
    out = []
    for index, node in enumerate(nodes):
        for change, how in _changes(node):
            mutated = copy.deepcopy(tree)
            target = [n for n in ast.walk(mutated)][[*ast.walk(tree)].index(node)]
            if how == "unwrap":  # not x -> x
                _replace(mutated, target, target.operand)
            elif how == "unround":  # round(x, k) / x.round(k) -> x
                inner = target.args[0] if isinstance(target.func, ast.Name) else target.func.value
                _replace(mutated, target, inner)
            else:
                how(target)
            try:
                text = ast.unparse(ast.fix_missing_locations(mutated))
            except Exception:
                continue
            out.append((Mutant(module, index, node.lineno, change), text))
    return source, out + _semantic(module, source)


_STALE_SAID: set[str] = set()


def _semantic(module: str, source: str) -> list[tuple[Mutant, str]]:
    """The module's hand-written semantic mutants (scripts/mutants_semantic.py); stale entries said once, loudly."""
    from mutants_semantic import SEMANTIC, semantic_mutants  # scripts/ is the script's own directory on sys.path

    found, stale = semantic_mutants(module, source)
    unknown = [m for m in SEMANTIC if m.module not in TARGETS]
    for m in [*stale, *unknown]:
        if (key := f"{m.module}: {m.meaning}") not in _STALE_SAID:
            _STALE_SAID.add(key)
            why = "no target of that name" if m in unknown else "its text is not found exactly once"
            print(f"STALE semantic mutant (scripts/mutants_semantic.py; {why}): {key}", flush=True)
    return [(Mutant(module, -1 - k, line, change), text) for k, (line, change, text) in enumerate(found)]


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if v is old:
                        value[i] = new
                        return


def run_one(scratch: Path, mutant: Mutant, text: str, tests: tuple[str, ...], timeout: int) -> bool:
    """True if the module's tests fail (the mutant is killed)."""
    target = scratch / "face" / f"{mutant.module}.py"
    target.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(scratch), "FACE_PROJECT_ROOT": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    if env.get("FACE_DATA_MIRROR"):  # relative to where this script was started, not to the scratch copy
        env["FACE_DATA_MIRROR"] = str(Path(env["FACE_DATA_MIRROR"]).resolve())
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                              *[str(ROOT / t) for t in tests]], cwd=scratch, env=env, capture_output=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return True  # a mutant that hangs is noticed (the suite would time out)
    return res.returncode != 0


def _equivalent() -> dict[str, str]:
    """scripts/mutation_equivalent.txt: mutant key -> the reason it is judged equivalent."""
    equivalent = {}
    eq_file = ROOT / "scripts" / "mutation_equivalent.txt"
    if eq_file.exists():
        for line in eq_file.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, why = line.partition(" | ")
                equivalent[key.strip()] = why.strip()
    return equivalent


def _scratches(jobs: int) -> list[Path]:
    """One scratch copy of the package per job."""
    dirs = []
    for _ in range(max(1, jobs)):
        d = Path(tempfile.mkdtemp(prefix="mutation_"))
        shutil.copytree(ROOT / "face", d / "face", ignore=shutil.ignore_patterns("__pycache__"))
        dirs.append(d)
    return dirs


def run_module(todo: list[tuple[Mutant, str]], tests: tuple[str, ...], args: argparse.Namespace) -> list[Mutant]:
    """Run the module's tests against each mutant, ``args.jobs`` at a time; the survivors."""
    dirs = _scratches(args.jobs)
    scratches: queue.Queue = queue.Queue()
    for d in dirs:
        scratches.put(d)

    def run(item: tuple[Mutant, str]) -> tuple[Mutant, bool]:
        d = scratches.get()
        try:
            return item[0], run_one(d, item[0], item[1], tests, args.timeout)
        finally:
            scratches.put(d)

    survivors = []
    try:
        with cf.ThreadPoolExecutor(len(dirs)) as pool:
            for m, dead in pool.map(run, todo):
                if not dead:
                    survivors.append(m)
                    print("  survived " + m.key, flush=True)
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    return survivors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated modules (default: all of " + ", ".join(TARGETS) + ")")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--match", action="append", default=[],
                    help="run only the mutants whose key contains this text, e.g. 'metaeval:62:' (repeatable)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args(argv)
    modules = args.only.split(",") if args.only else list(TARGETS)
    equivalent = _equivalent()
    total = skipped = 0
    survivors: list[Mutant] = []
    all_keys = {m.key for module in modules for m, _ in mutants_of(module)[1]}
    stale = [k for k in equivalent if k.split(":")[0] in modules and k not in all_keys]
    for k in stale:  # the module changed since the entry was written: its line moved, or the mutant is gone
        print(f"stale entry in scripts/mutation_equivalent.txt (no such mutant now): {k}", flush=True)
    for module in modules:
        _, tests = TARGETS[module]
        _, mutants = mutants_of(module)
        print(f"{module}: {len(mutants)} mutants, tests {', '.join(tests)}", flush=True)
        if args.list:
            for m, _ in mutants:
                print("  " + m.key + (" (equivalent)" if m.key in equivalent else ""))
            continue
        todo = [(m, t) for m, t in mutants if m.key not in equivalent
                and (not args.match or any(x in m.key for x in args.match))]
        skipped += sum(m.key in equivalent for m, _ in mutants)
        survivors += run_module(todo, tests, args)
        total += len(todo)
    if args.list:
        return 0
    for s in sorted(survivors, key=lambda m: (m.module, m.line)):
        print("SURVIVED " + s.key)
    killed = total - len(survivors)
    score = killed / total if total else 1.0
    print(f"mutation score: {killed} killed of {total} non-equivalent mutants = {100 * score:.1f} % "
          f"({skipped} judged equivalent, scripts/mutation_equivalent.txt)")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
