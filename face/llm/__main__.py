"""Cache CLI.

    python -m face.llm stats --cache-dir DIR
    python -m face.llm clear --cache-dir DIR [--model M]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from .cache import CACHE_FILE, SampleCache


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m face.llm", description="Inspect or clear the LLM cache")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats", help="samples per model/tag, size on disk")
    st.add_argument("--cache-dir", required=True)
    st.add_argument("--json", action="store_true", help="print JSON")
    cl = sub.add_parser("clear", help="delete cached samples (all, or of one model)")
    cl.add_argument("--cache-dir", required=True)
    cl.add_argument("--model", default=None)
    a = ap.parse_args(argv)

    if not (Path(a.cache_dir) / CACHE_FILE).exists():
        print(f"no LLM cache at {Path(a.cache_dir) / CACHE_FILE}", file=sys.stderr)
        return 1
    with contextlib.closing(SampleCache(a.cache_dir)) as cache:
        if a.cmd == "stats":
            s = cache.stats()
            if a.json:
                print(json.dumps(s, indent=1))
            else:
                print(f"{s['path']}: {s['samples']} samples, {s['bytes'] / 1e6:.2f} MB")
                for m, d in s["models"].items():
                    print(f"  model {m}: {d['samples']} samples")
                for t, c in s["tags"].items():
                    print(f"  tag {t}: {c} samples")
        else:
            n = cache.clear(a.model)
            print(f"deleted {n} samples" + (f" of model {a.model}" if a.model else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
