"""Room sizes (make lint): no module of face/ over 400 lines, no function or method over 60 lines.

    .venv/bin/python scripts/check_sizes.py [--max-module 400] [--max-function 60] [PATH ...]

A function's length runs from its ``def`` (decorators excluded) to its last line, docstring included. Prints one
line per room over its size and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def oversized(path: Path, max_module: int, max_function: int) -> list[str]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    out = []
    lines = len(text.splitlines())
    if lines > max_module:
        out.append(f"{rel}: {lines} lines (module limit {max_module})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > max_function:
                out.append(f"{rel}:{node.lineno}: {node.name}() {length} lines (function limit {max_function})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, default=[ROOT / "face"])
    ap.add_argument("--max-module", type=int, default=400)
    ap.add_argument("--max-function", type=int, default=60)
    args = ap.parse_args(argv)
    files = sorted(f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    found = [line for f in files for line in oversized(f.resolve(), args.max_module, args.max_function)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
