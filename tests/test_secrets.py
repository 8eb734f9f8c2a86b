"""The API key's value never reaches MLflow (params, tags, artifacts), run files, logs or the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

import face.runner
from face.testing.scripted import ScriptedServer

SECRET = "sk-test-SECRET-7f3a9c"


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            try:
                if needle in p.read_bytes():
                    hits.append(p)
            except OSError:
                pass
    return hits


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_api_key_value_is_never_written_anywhere(cfg_factory, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FACE_TEST_API_KEY", SECRET)
    srv = ScriptedServer()
    with srv as info:
        cfg = cfg_factory("experiment=crsarena_main", "llm=openai_compatible", f"llm.base_url={info.base_url}",
                          "llm.api_key_env=FACE_TEST_API_KEY", "llm.model=scripted-model", "llm.progress=false",
                          "dataset.limit=1", "metaeval.n_boot=10", "method.instructions.max=1", "method.scoring.n=1",
                          "method.particles.k=1", "aspects=[relevance,efficiency]")
        caplog.set_level("DEBUG")
        face.runner.run(cfg)
        assert srv.seen_auth(SECRET)  # the key was really used
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()}
    assert {"mlflow.db", "mlruns", "run", "cache"} <= written  # the scan below covers what the run wrote
    assert _files_containing(tmp_path, b"scripted-model")  # a string the run did write is found by the scan
    assert _files_containing(tmp_path, SECRET.encode()) == []  # mlflow.db, mlruns/, run dir, cache, results
    assert SECRET not in caplog.text
