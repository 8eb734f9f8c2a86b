"""Typed settings (face.settings): every settings class refuses a value of the wrong type (a bool is not a number,
"false" is not a bool, an integer is not a bool), NaN and infinity in every float setting, and an unknown key, with
one line naming the dotted key; each default stands once, in conf/; and through ``scripts/run.py`` a bad setting of each
family ends with exit 2, one line naming the key, and nothing of a run written."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from face.baselines.llm import GEval, LLMCoTICL, LLMDirect
from face.baselines.reference import ReferenceMetric
from face.datasets.chatlogs import ChatLogsSettings
from face.datasets.crsarena import CRSArenaSettings
from face.datasets.usr import USRSettings
from face.errors import ConfigError
from face.experiments.optimize_selection import SelectionSettings
from face.experiments.settings import ChecksSettings, MetaevalSettings, ReportSettings, RunSettings
from face.llm import LLMConfig
from face.optimize.config import OptimizerConfig, SplitConfig, WriterConfig
from face.pipeline.particles import ParticlesSpec
from face.pipeline.scoring import ScoringSpec
from face.settings import _parts

ROOT = Path(__file__).resolve().parents[1]

# every settings class: (class, its dotted prefix, the keys it needs to be built at all)
FAMILIES = [
    (LLMConfig, "llm", {}),
    (OptimizerConfig, "optimizer", {}), (SplitConfig, "optimizer.split", {}), (WriterConfig, "optimizer.writer", {}),
    (RunSettings, "", {}), (MetaevalSettings, "metaeval", {}), (ChecksSettings, "checks", {}),
    (ReportSettings, "report", {}), (SelectionSettings, "selection", {}),
    (CRSArenaSettings, "dataset", {}),
    (ChatLogsSettings, "dataset", {"path": "x"}), (USRSettings, "dataset", {"corpus": "topical_chat"}),
    (LLMDirect, "method", {}), (LLMCoTICL, "method", {}), (GEval, "method", {}), (ReferenceMetric, "method", {}),
]
IDS = [f"{c.__name__}" for c, _, _ in FAMILIES]


def _members(annotation) -> list:
    """The types a value may have (``X | None`` and ``Annotated[X, ...]`` unwrapped)."""
    return [t for t, _ in _parts(annotation, [])]


def _fields(cls, kind) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if kind in _members(cls.__pydantic_fields__[f.name].annotation)]


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@pytest.mark.parametrize("cls, prefix, needs", FAMILIES, ids=IDS)
def test_every_float_setting_refuses_nan_and_infinity(cls, prefix, needs):
    names = _fields(cls, float)
    for name in names:
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(ConfigError) as e:
                cls(**{**needs, name: bad})
            assert re.fullmatch(rf"{re.escape(_key(prefix, name))} must be a finite number.*, got {bad!r}",
                                str(e.value)), str(e.value)


def test_the_float_settings_found_are_the_ones_there_are():
    """The table above reaches the float settings (the test cannot pass by finding none)."""
    floats = {c.__name__: _fields(c, float) for c, _, _ in FAMILIES}
    assert {"timeout_s", "temperature", "top_p", "max_cost_usd", "latency_tolerance", "backoff_base_s",
            "batch_price_factor"} <= set(floats["LLMConfig"])
    assert floats["OptimizerConfig"] == ["ucb_c"] and floats["SplitConfig"] == ["dev_fraction"]
    assert floats["MetaevalSettings"] == ["confidence"] and floats["LLMDirect"] == ["temperature"]
    assert sum(map(len, floats.values())) >= 19  # 12 of the LLM, 3 of the optimizer, 1 of the run, 1 per LLM baseline


@pytest.mark.parametrize("cls, prefix, needs", FAMILIES, ids=IDS)
def test_a_bool_is_a_bool_and_an_integer_an_integer(cls, prefix, needs):
    for name in _fields(cls, bool):
        for bad in ("false", "true", 1, 0, None):
            with pytest.raises(ConfigError, match=rf"^{re.escape(_key(prefix, name))} must be true or false, got "):
                cls(**{**needs, name: bad})
    for name in _fields(cls, int):
        if float in _members(cls.__pydantic_fields__[name].annotation):
            continue  # a Number: checked below
        for bad in (True, "3", 1.5):
            with pytest.raises(ConfigError, match=rf"^{re.escape(_key(prefix, name))} must be an integer"):
                cls(**{**needs, name: bad})
    for name in _fields(cls, float):
        for bad in (True, "0.5"):
            with pytest.raises(ConfigError, match=rf"^{re.escape(_key(prefix, name))} must be a finite number"):
                cls(**{**needs, name: bad})


@pytest.mark.parametrize("cls, prefix, needs", FAMILIES, ids=IDS)
def test_an_unknown_key_is_refused_naming_it(cls, prefix, needs):
    with pytest.raises(ConfigError, match=rf"^unknown setting {re.escape(_key(prefix, 'no_such_key'))}"):
        cls(**{**needs, "no_such_key": 1})


# ---------------------------------------------------------------- the messages, value by value
BAD = [  # (class, settings, the whole line)
    (LLMConfig, {"timeout_s": -5}, "llm.timeout_s must be a finite number > 0, got -5"),
    (LLMConfig, {"top_p": 0}, "llm.top_p must be a finite number in (0, 1] or null, got 0"),
    (LLMConfig, {"temperature": 2.5}, "llm.temperature must be a finite number in [0, 2], got 2.5"),
    (LLMConfig, {"max_calls": -1}, "llm.max_calls must be an integer >= 0 or null, got -1"),
    (LLMConfig, {"http_client": "curl"}, "llm.http_client must be one of 'aiohttp', 'httpx', got 'curl'"),
    (LLMConfig, {"latency_tolerance": 1}, "llm.latency_tolerance must be a finite number > 1, got 1"),
    (LLMConfig, {"base_url": []}, "llm.base_url must be a string or a non-empty list of non-empty strings or null, "
                                  "got []"),
    (LLMConfig, {"api_key_env": "sk-proj-AbCdEf0123456789xyzXYZ"},
     "llm.api_key_env must be the NAME of an environment variable (letters, digits, _), not the key itself"),
    (LLMConfig, {"temperature": "sk-proj-AbCdEf0123456789xyzXYZ"}, "llm.temperature must be a finite number in "
                                                                   "[0, 2], got '***'"),  # a key is never repeated
    (LLMConfig, {"server": {"model": "m"}},
     "llm.server needs a _target_ (the server class, e.g. face.llm.local.LocalServer)"),
    (OptimizerConfig, {"split": {"folds": 2, "fold": 2}}, "optimizer.split.fold must be in 0..1, got 2"),
    (OptimizerConfig, {"split": {"dev_fraction": 1}}, "optimizer.split.dev_fraction must be a finite number in "
                                                      "[0, 1), got 1"),
    (OptimizerConfig, {"writer": {"example_chars": 5}}, "optimizer.writer.example_chars must be an integer >= 20, "
                                                        "got 5"),
    (OptimizerConfig, {"reward": "spearmann"}, "optimizer.reward must be one of 'spearman', 'pearson', 'kendall', "
                                               "got 'spearmann'"),
    (OptimizerConfig, {"stop_after_round": 0}, "optimizer.stop_after_round must be an integer >= 1 or null, got 0"),
    (RunSettings, {"seed": "abc"}, "seed must be an integer, got 'abc'"),
    (RunSettings, {"aspects": 5}, "aspects must be a string or a list of strings or null, got 5"),
    (RunSettings, {"metaeval": {"confidence": "0.9"}}, "metaeval.confidence must be a finite number in (0, 1), got "
                                                       "'0.9'"),
    (RunSettings, {"metaeval": {"n_boot": -1}}, "metaeval.n_boot must be an integer >= 0, got -1"),
    (RunSettings, {"metaeval": {"splits": "redial"}}, "metaeval.splits must be a list of strings or null, got "
                                                      "'redial'"),
    (RunSettings, {"checks": {"max_utterance_chars": 0}}, "checks.max_utterance_chars must be an integer >= 1 or "
                                                          "null, got 0"),
    (RunSettings, {"report": {"out_dir": 5}}, "report.out_dir must be a string or null, got 5"),
    (SelectionSettings, {"budgets": []}, "selection.budgets must be a non-empty list of integers >= 1, got []"),
    (SelectionSettings, {"ucb_cs": [1, -1]}, "selection.ucb_cs must be a non-empty list of finite numbers >= 0, "
                                             "got -1 (item 1)"),
    (CRSArenaSettings, {"systems": ["kbrd", 3]}, "dataset.systems must be a list of strings or null, got 3 "
                                                       "(item 1)"),
    (CRSArenaSettings, {"limit": 0}, "dataset.limit must be an integer >= 1 or null, got 0"),
    (CRSArenaSettings, {"repeat": 0}, "dataset.repeat must be an integer >= 1, got 0"),
    (USRSettings, {"corpus": "reddit"}, "dataset.corpus must be one of 'topical_chat', 'persona_chat', got 'reddit'"),
    (ChatLogsSettings, {}, "dataset.path is required: a JSON / JSONL file of conversations"),
    (LLMDirect, {"n": 0}, "method.n must be an integer >= 1, got 0"),
    (LLMCoTICL, {"folds": 1}, "method.folds must be an integer >= 2, got 1"),
    (ReferenceMetric, {"metric": "bleu5"}, "method.metric must be one of 'bleu1', 'bleu2', 'bleu3', 'bleu4', "
                                           "'meteor', 'rouge_l', got 'bleu5'"),
]


@pytest.mark.parametrize("cls, settings, line", BAD, ids=[line.split(" ")[0] for _, _, line in BAD])
def test_a_bad_value_is_one_line_naming_the_key_and_what_it_takes(cls, settings, line):
    with pytest.raises(ConfigError) as e:
        cls(**settings)
    assert str(e.value) == line


@pytest.mark.parametrize("cls, key", [(ScoringSpec, "n"), (ParticlesSpec, "k"), (LLMDirect, "n"),
                                      (GEval, "n_fallback"), (OptimizerConfig, "alpha"), (OptimizerConfig, "beta")])
def test_samples_a_request_that_the_requests_in_flight_could_not_hold_are_refused_with_the_estimate(cls, key,
                                                                                                  monkeypatch):
    """Issue 41: method.scoring.n=100000000 grew to 21 GB until the OOM killer ended the run. On a machine of
    4,000,000 pages of 4,096 bytes (16.384 GB; half: 8.192 GB), with 64 requests in flight at ~5,000 bytes a sample,
    a request may ask for 8.192e9 / (64 × 5,000) = 25,600 samples; 10^8 would hold 64 × 10^8 × 5,000 = 32,000 GB."""
    import os

    monkeypatch.setattr(os, "sysconf", {"SC_PHYS_PAGES": 4_000_000, "SC_PAGE_SIZE": 4096}.__getitem__)
    prefix = {ScoringSpec: "method.scoring", ParticlesSpec: "method.particles", OptimizerConfig: "optimizer"}
    with pytest.raises(ConfigError) as e:
        cls(**{key: 10**8})
    assert str(e.value) == (f"{prefix.get(cls, 'method')}.{key} must fit in memory: 64 requests in flight of "
                            "100,000,000 samples would hold ≈ 32,000 GB (~5 KB a sample), more than half this "
                            "machine's 16 GB (at most 25,600 here), got 100000000")
    assert getattr(cls(**{key: 25_600}), key) == 25_600
    with pytest.raises(ConfigError, match="must fit in memory"):
        cls(**{key: 25_601})


def test_the_memory_estimate_is_stated_in_gb_of_10_9_bytes_rounded_to_the_nearest(monkeypatch):
    """1,650,000,001 pages of 10 bytes: 16.50000001 GB, said "17 GB"; 625,001,563 samples × 64 × 5,000 bytes =
    200,000.50016 GB, said "200,001 GB"; at most 8,250,000,005 // 320,000 = 25,781 samples a request."""
    import os

    from face.llm.sizes import held_in_memory

    monkeypatch.setattr(os, "sysconf", {"SC_PHYS_PAGES": 1_650_000_001, "SC_PAGE_SIZE": 10}.__getitem__)
    with pytest.raises(ValueError) as e:
        held_in_memory(625_001_563)
    assert str(e.value) == ("must fit in memory: 64 requests in flight of 625,001,563 samples would hold ≈ 200,001 GB "
                            "(~5 KB a sample), more than half this machine's 17 GB (at most 25,781 here), "
                            "got 625001563")


def test_a_dataset_and_a_baseline_refuse_their_settings_when_built():
    from face.datasets.crsarena import CRSArenaEval
    from face.datasets.usr import USR

    with pytest.raises(ConfigError, match=r"^dataset.download must be true or false, got 'false'$"):
        CRSArenaEval(download="false")
    with pytest.raises(ConfigError, match=r"^dataset.corpus must be one of"):
        USR("usr", "reddit")  # positional, as the tests and docs call it
    with pytest.raises(ConfigError, match=r"^method.temperature must be a finite number >= 0, got nan$"):
        LLMDirect(temperature=math.nan)


def test_numbers_keep_their_type_and_the_optimizer_fingerprint_its_value():
    """An integer given for a number stays an integer (a request's temperature enters its cache key as written),
    and the optimizer's fingerprint (compared when resuming) is what it was before the settings were typed."""
    import hashlib
    import json

    assert LLMConfig(temperature=0).temperature == 0 and type(LLMConfig(temperature=0).temperature) is int
    fields = json.dumps(OptimizerConfig().fingerprint_fields(), sort_keys=True, default=str)
    assert hashlib.sha256(fields.encode()).hexdigest()[:16] == "ed05590228f9e8d2"  # main before this change
    assert OptimizerConfig(split={"folds": 3, "fold": 2}).split == SplitConfig(folds=3, fold=2)


# ---------------------------------------------------------------- each default once: in conf/

def _settings_classes() -> list[type]:
    from face.baselines.transfer import FaceTransfer
    from face.experiments.system_comparison import Settings as ComparisonSettings
    from face.pipeline.method import CostSpec, Face, InstructionsSpec
    from face.pipeline.released import FaceReleased

    return [c for c, _, _ in FAMILIES] + [Face, FaceTransfer, FaceReleased, ScoringSpec, ParticlesSpec,
                                          InstructionsSpec, CostSpec, ComparisonSettings]


@pytest.mark.parametrize("cls", _settings_classes(), ids=lambda c: c.__name__)
def test_a_key_conf_gives_a_value_has_no_default_in_its_class(cls):
    """One place per default: a key of a settings class's conf file (read here with OmegaConf) is a field of the
    class (a misspelt key would be refused by the run) and has no default of its own there."""
    if cls.__settings_conf__ is None:
        return
    file, _, node = cls.__settings_conf__.partition(":")
    shipped = OmegaConf.load(ROOT / "conf" / file)
    for d in shipped.get("defaults", []):  # llm/X.yaml and method/face_transfer.yaml extend a file of their group
        if isinstance(d, str) and d != "_self_":
            shipped = OmegaConf.merge(OmegaConf.load(ROOT / "conf" / Path(file).parent / f"{d}.yaml"), shipped)
    shipped = OmegaConf.select(shipped, node) if node else shipped
    given = {k for k in shipped if k != "defaults" and not k.startswith("_") and not OmegaConf.is_missing(shipped, k)}
    fields = cls.__pydantic_fields__
    assert given - {"hydra", "task_name", "runner"} <= set(fields), f"{file}: keys {cls.__name__} does not know"
    doubled = [k for k in given & set(fields) if not fields[k].is_required()]
    assert doubled == [], f"{cls.__name__} repeats defaults of conf/{file}"


def test_a_class_built_in_code_takes_the_values_of_its_conf_file():
    """Read off the YAML by hand: llm/base.yaml (timeout_s: 120, cache_dir: ${paths.cache_dir}/llm), the paper's
    optimizer (b = α = β = 4), method/face.yaml with run_size/paper.yaml (k = 20, n = 5, 10 rounds of draws)."""
    llm = LLMConfig()
    assert (llm.timeout_s, llm.temperature, llm.max_retries) == (120, 0.6, 6)
    assert llm.cache_dir is not None and llm.cache_dir.endswith("/llm")
    paper = OptimizerConfig()
    assert (paper.beam, paper.alpha, paper.beta, paper.ucb_c, paper.split.dev_fraction) == (4, 4, 4, 1.0, 0.25)
    assert (ParticlesSpec().k, ScoringSpec().n, ScoringSpec().draws.rounds) == (20, 5, 10)
    assert ScoringSpec(draws={"rounds": 3}).draws.max_extra is None  # a nested mapping overlays the file's
    assert (RunSettings().metaeval.n_boot, SelectionSettings().repeats) == (1000, 10)
    assert LLMDirect(n=3).draws.rounds == 4 and GEval().n_fallback == 20


# ---------------------------------------------------------------- through the front door

CLI_CASES = {  # overrides -> words of the one error line
    "seed_not_integer": (["seed=abc"], "seed must be an integer, got 'abc'"),
    "seed_bool": (["seed=true"], "seed must be an integer, got True"),
    "confidence_string": (["metaeval.confidence='0.9'"], "metaeval.confidence must be a finite number in (0, 1)"),
    "confidence_nan": (["metaeval.confidence=nan"], "metaeval.confidence must be a finite number in (0, 1), got nan"),
    "n_boot_bool": (["metaeval.n_boot=true"], "metaeval.n_boot must be an integer >= 0, got True"),
    "max_utterance_chars_zero": (["+checks.max_utterance_chars=0"], "checks.max_utterance_chars must be an integer"),
    "out_dir_number": (["report.out_dir=5"], "report.out_dir must be a string or null, got 5"),
    "timeout_nan": (["experiment=crsarena_main", "llm.timeout_s=nan"], "llm.timeout_s must be a finite number > 0, "
                                                                        "got nan"),
    "timeout_inf": (["experiment=crsarena_main", "llm.timeout_s=inf"], "llm.timeout_s must be a finite number > 0, "
                                                                        "got inf"),
    "cache_string_false": (["experiment=crsarena_main", "llm.cache='false'"], "llm.cache must be true or false, "
                                                                              "got 'false'"),
    "probe_integer": (["experiment=crsarena_main", "llm.probe=1"], "llm.probe must be true or false, got 1"),
    "limit_bool": (["dataset.limit=true"], "dataset.limit must be an integer >= 1 or null, got True"),
    "download_string": (["dataset.download=no"], "dataset.download must be true or false, got 'no'"),
    "ucb_c_inf": (["experiment=optimize_selection", "optimizer.ucb_c=inf"],
                  "optimizer.ucb_c must be a finite number >= 0, got inf"),
    "dev_fraction_nan": (["experiment=optimize_selection", "optimizer.split.dev_fraction=nan"],
                         "optimizer.split.dev_fraction must be a finite number in [0, 1), got nan"),
    "selection_ucb_c_nan": (["experiment=optimize_selection", "selection.ucb_cs=[1.0,nan]"],
                            "selection.ucb_cs must be a non-empty list of finite numbers >= 0, got nan (item 1)"),
    "baseline_n_bool": (["experiment=crsarena_baselines", "baselines.llm_direct.n=true"],
                        "method.n must be an integer >= 1, got True"),
    "baseline_temperature_nan": (["experiment=crsarena_baselines", "baselines.llm_cot_icl.temperature=nan"],
                                 "method.temperature must be a finite number >= 0, got nan"),
}
# if a case were accepted, it would run this small (a scripted LLM, no intervals, no tracking)
GUARDS = ["llm=fake", "metaeval.n_boot=0", "tracking.enabled=false", "aspects=[relevance]"]


@pytest.mark.slow  # ~1 s a case, in-process
@pytest.mark.parametrize("name", CLI_CASES)
def test_a_bad_setting_of_every_family_is_refused_by_the_front_door_before_anything_runs(name, tmp_path,
                                                                                         monkeypatch, data_dir):
    from reliability import refused, run

    overrides, words = CLI_CASES[name]
    keys = {o.lstrip("+").split("=")[0] for o in overrides}
    guards = [g for g in GUARDS if g.split("=")[0] not in keys]
    o = run("run.py", [*guards, *overrides, f"paths.data_dir={data_dir}", "paths.data_mirror=null"], tmp_path,
            monkeypatch)
    assert refused(o, words) == []
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    # nothing of a run: no results, no cache, no MLflow store, no run file (Hydra's own .hydra/ and log only)
    assert [p for p in written if "/.hydra/" not in p and not p.endswith(".log")] == []
