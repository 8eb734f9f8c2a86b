"""The MLflow experiments the project uses open on their runs table in MLflow 3's UI: the UI chooses the page by the
experiment's ``mlflow.experimentKind`` tag (the GenAI traces overview, empty for FACE, where it is missing)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from face.tracking.store import use_experiment

pytestmark = pytest.mark.slow


def _kind(uri: str, name: str) -> str | None:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri).get_experiment_by_name(name).tags.get("mlflow.experimentKind")


def test_experiments_open_on_their_runs_new_or_existing_and_a_kind_set_by_hand_is_kept(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    t = {"tracking_uri": uri, "artifact_location": None}
    use_experiment(OmegaConf.create({**t, "experiment_name": "fresh"}))
    client = MlflowClient(tracking_uri=uri)
    client.create_experiment("older", artifact_location=(tmp_path / "a").as_uri())  # made before the tag existed
    client.create_experiment("traces", artifact_location=(tmp_path / "b").as_uri(),
                             tags={"mlflow.experimentKind": "genai_development"})
    for name in ("older", "traces"):
        use_experiment(OmegaConf.create({**t, "experiment_name": name}))
    assert [_kind(uri, n) for n in ("fresh", "older", "traces")] == [
        "custom_model_development", "custom_model_development", "genai_development"]
