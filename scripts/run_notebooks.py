"""Run every notebook in notebooks/ top to bottom through a real Jupyter kernel (nbclient + ipykernel), as a
reader's Jupyter would: ``make notebook``. The executed copies (with their outputs) go to ``--out`` (default
notebooks/executed/, not committed); the first failing cell stops the run with its error and exit 1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's face, not an installed one


def execute(path: Path, out_dir: Path | None = None, timeout: int = 600):
    """The notebook after running every cell in a fresh kernel started in the notebook's own folder (its
    relative paths resolve as in Jupyter); written to ``out_dir`` when given."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    if out_dir is not None:
        from face.files import atomic_write_text

        atomic_write_text(out_dir / path.name, nbformat.writes(nb))
    return nb


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    p.add_argument("--out", type=Path, default=ROOT / "notebooks" / "executed", help="where the executed copies go")
    args = p.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    for path in args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb")):
        try:
            execute(path.resolve(), args.out)
        except CellExecutionError as e:
            print(f"error: {path.name}: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
            return 1
        print(f"{path.name}: every cell ran; executed copy in {args.out / path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
