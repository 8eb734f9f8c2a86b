"""Table and plots of an optimize_instructions sweep, read back from MLflow: see face/experiments/sweep_report.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from face.experiments.sweep_report import main

if __name__ == "__main__":
    sys.exit(main())
