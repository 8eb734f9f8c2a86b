"""Shared fixtures: the data mirror (../shared/data in CI), a verified data dir, Hydra-composed configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))


def _mirror() -> Path:
    env = os.environ.get("FACE_DATA_MIRROR")  # relative to where the tests are run from, as the README writes it
    return Path(env).resolve() if env else ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def mirror() -> Path:
    m = _mirror()
    if not (m / "crsarena_eval" / "crs_arena_eval.json").exists():
        pytest.fail(f"data mirror not found at {m}: set FACE_DATA_MIRROR to a copy of the data (e.g. ../shared/data)")
    return m


@pytest.fixture(scope="session")
def data_dir(mirror: Path, tmp_path_factory) -> Path:
    """A data directory filled from the mirror through the project's own fetch step (sha256-verified)."""
    from face.data import ensure_data

    d = tmp_path_factory.mktemp("data")
    ensure_data(d, mirror=mirror, download=False)
    return d


def make_cfg(tmp_path: Path, data_dir: Path, overrides: list[str], tracking: bool = True) -> DictConfig:
    """Compose the real Hydra config with every output redirected into ``tmp_path``."""
    base = [
        f"paths.data_dir={data_dir}",
        f"paths.results_dir={tmp_path / 'results'}",
        f"paths.output_dir={tmp_path / 'run'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "paths.data_mirror=null",
        "dataset.download=false",
    ]
    if tracking:
        base += [f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                 f"tracking.artifact_location={tmp_path / 'mlruns'}"]
    else:
        base += ["tracking=none"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=base + overrides)


@pytest.fixture
def cfg_factory(tmp_path: Path, data_dir: Path):
    def factory(*overrides: str, tracking: bool = True) -> DictConfig:
        return make_cfg(tmp_path, data_dir, list(overrides), tracking)

    return factory
