"""Entry point for every experiment: ``python scripts/run.py experiment=NAME [overrides]`` (Hydra)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
sys.path.insert(0, str(ROOT))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from face.data.errors import DataError  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        importlib.import_module(cfg.runner).run(cfg)
    except DataError as e:  # bad input: one clear line, no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
