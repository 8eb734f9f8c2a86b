"""Issue 21, whole runs against the scripted server: the endpoint probe survives transient faults like any request
(the run sends what the clean run sends, plus the retries, and predicts the same), the answer counts of
llm_usage.json, the MLflow metrics and the console line are particle_scores.jsonl's, and each
``method.scoring.logprobs_missing`` policy does what it says with answers that come without logprobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from live_run import run_live

from face.testing.faults import TRANSPORT_KINDS, FaultProxy
from face.testing.scripted import ScriptedServer

LIVE = ["experiment=crsarena_main", "llm=openai_compatible", "llm.model=scripted-model", "llm.progress=false",
        "dataset.limit=2", "method.particles.source=released", "method.instructions.max=2", "method.scoring.n=3",
        "aspects=[relevance,efficiency]", "metaeval.n_boot=0", "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.05",
        "llm.n_per_request=8", "llm.probe=true", "llm.adaptive_concurrency=false", "llm.concurrency=8"]


pytestmark = pytest.mark.usefixtures("forget_probes")


def _live(cfg_factory, tmp_path: Path, name: str, base_url: str, *extra: str, tracking: bool = False):
    return run_live(cfg_factory, tmp_path / name, [*LIVE, f"llm.base_url={base_url}", *extra], tracking)


@pytest.mark.slow
@pytest.mark.parametrize("factor", [1, 200])
def test_a_priced_run_stops_at_the_cap_or_its_first_misreport_and_its_stop_line_states_llm_usage_json(
        cfg_factory, tmp_path, capsys, factor):
    """At 1× the scripted server's counts stay within each request's bound: the cap stops the run at or under $3. At
    200× its very first reply (the endpoint probe's: 1 token asked, 200 reported) is above its bound: the run stops
    there, naming the misreport. Either way the stop line states llm_usage.json's spend."""
    import re

    from face.runner import EXIT_BUDGET, guarded, run

    price = 500.0 / factor  # ≈ 550 tokens a request by the server's count at 1×: ≈ $0.27 a request
    srv = ScriptedServer(usage_factor=factor)
    with srv as info:
        cfg = cfg_factory(*LIVE, f"llm.base_url={info.base_url}", f"paths.output_dir={tmp_path / 'run'}",
                          f"llm.price_input_per_mtok={price}", f"llm.price_output_per_mtok={price}",
                          "llm.max_cost_usd=3", "llm.force=true", tracking=False)
        with pytest.raises(SystemExit) as stop, guarded():
            run(cfg)
    assert stop.value.code == EXIT_BUDGET
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("stopped:")]
    doc = json.loads((tmp_path / "run" / "llm_usage.json").read_text())
    usage = doc["totals"]
    assert usage["http_requests"] == len(srv.log)
    assert usage["cost_usd"] == pytest.approx((usage["input_tokens"] + usage["output_tokens"]) * price / 1e6)
    assert float(re.search(r"\$(\d+\.\d+) spent", line).group(1)) == round(usage["cost_usd"], 6)
    if factor == 1:
        # each reasoned request's bound (its prompt bytes + 768 × 3 answer tokens, ≈ $2.3) is reserved: the run
        # stops once the next one's no longer fits
        assert usage["misreported_requests"] == 0 and len(srv.log) > 3 and 0 < usage["cost_usd"] <= 3.0
        assert "would be exceeded by the next request" in line
    else:  # the probe's two requests are sent together: both misreport, nothing else is sent
        assert usage["misreported_requests"] == len(srv.log) <= 2 and "endpoint misreport" in line
        assert doc["misreport"] in line and "max_tokens 1 × n 3" in doc["misreport"] + line


@pytest.fixture(scope="module")
def clean(tmp_path_factory, data_dir):
    """The LIVE run against a scripted server without faults -- what the runs with faults on the probe must send
    and predict besides their retries -- run once for the two tests that compare with it: (run file, usage)."""
    from helpers import ROOT, run_paths
    from hydra import compose, initialize_config_dir

    tmp = tmp_path_factory.mktemp("clean")

    def make_cfg(*overrides: str, tracking: bool = False):  # as conftest's cfg_factory composes
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=run_paths(tmp, data_dir, tracking) + list(overrides))

    with ScriptedServer() as info:
        return run_live(make_cfg, tmp / "clean", [*LIVE, f"llm.base_url={info.base_url}"])


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "particle_scores.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_a_429_on_the_probe_and_20_percent_429s_change_nothing_but_the_retries(cfg_factory, tmp_path, clean):
    clean, clean_usage = clean
    srv = ScriptedServer(fault_rate=0.2, fault_kinds=("429",), retry_after_s=0.01)
    srv.force("429")  # the first request of the run: the probe's
    with srv as info:
        faulty, usage = _live(cfg_factory, tmp_path, "faulty", info.base_url)
    assert srv.log[0]["status"] == 429 and srv.log[0]["n"] == 3  # the probe's n=3 request was refused once
    faults = [e for e in srv.log if e["status"] == 429]
    n = clean_usage["http_requests"]
    assert clean_usage["retries"] == 0 and clean_usage["by_tag"]["probe"]["http_requests"] == 2
    scoring = [t for k, t in clean_usage["by_tag"].items() if k.startswith("score:")]
    assert scoring and all(t["http_requests"] == t["requests"] for t in scoring)  # n honoured: one HTTP request each
    assert len(faults) > 0.1 * n and usage["retries"] == len(faults)
    assert usage["http_requests"] == n and len(srv.log) == n + len(faults)
    assert faulty == clean


@pytest.mark.slow
def test_mixed_transport_faults_on_the_probe_change_nothing_but_the_retries(cfg_factory, tmp_path, clean):
    clean, clean_usage = clean
    srv = ScriptedServer()
    srv.force("500")  # the probe's first request, whatever the proxy does to it
    with srv as info, FaultProxy(info.base_url, rate=0.2, kinds=TRANSPORT_KINDS, hang_s=1.5) as proxy:
        faulty, usage = _live(cfg_factory, tmp_path, "faulty", proxy.base_url, "llm.timeout_s=0.5")
    assert usage["http_requests"] == clean_usage["http_requests"] and usage["failures"] == 0
    assert usage["retries"] >= len(proxy.faults()) > 0.1 * usage["http_requests"]
    assert faulty == clean


@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_answer_counts_agree_with_particle_scores_in_usage_metrics_and_console(cfg_factory, tmp_path, capsys):
    import mlflow

    with ScriptedServer() as info, FaultProxy(info.base_url, rate=0.4, kinds=("garbled",)) as proxy:
        _live(cfg_factory, tmp_path, "run", proxy.base_url, "method.scoring.draws.rounds=2", tracking=True)
    out = capsys.readouterr().out
    recs = _records(tmp_path / "run")
    rejected = sum(v is None for r in recs for v in r["samples"])
    redraws = sum(r["n_retried"] for r in recs)
    invalid = sum(r["n_requested"] - r["n_valid"] for r in recs)
    defaulted = sum(r["n_defaulted"] for r in recs)
    assert rejected > 0 and redraws > 0 and defaulted > 0 and invalid == defaulted  # fallback=min
    usage = json.loads((tmp_path / "run" / "llm_usage.json").read_text())["totals"]
    assert (usage["rejected_answers"], usage["answer_retries"], usage["invalid_answers"],
            usage["defaulted_answers"]) == (rejected, redraws, invalid, defaulted)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    m = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/numbers.json"))  # counters, not metrics
    assert (m["llm_rejected_answers"], m["llm_answer_retries"], m["llm_invalid_answers"],
            m["llm_defaulted_answers"]) == (rejected, redraws, invalid, defaulted)
    assert (f"LLM answers: {rejected} invalid draws, {redraws} redraws, {invalid} samples without a valid answer "
            f"({defaulted} scored as the lowest), 0 scored without logprobs") in out


POLICIES = {"parsed": "min", "redraw": "drop", "min": "drop"}  # logprobs_missing -> invalid.fallback


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_each_logprobs_missing_policy_scores_answers_without_logprobs_as_it_says(cfg_factory, tmp_path, policy):
    import math

    srv = ScriptedServer(logprobs_missing=0.5)
    with srv as info:
        _, usage = _live(cfg_factory, tmp_path, policy, info.base_url, "method.scoring.estimator=logprobs",
                         "method.scoring.draws.rounds=2", f"method.scoring.fallback={POLICIES[policy]}",
                         f"method.scoring.logprobs_missing={policy}")
    recs = _records(tmp_path / policy)
    # answered (a parsed score) but no draw came with logprobs
    without = [r for r in recs if r["distribution"] is None and any(v is not None for v in r["samples"])]
    assert 0 < len(without) < len(recs)
    assert any(r["n_retried"] for r in recs if r["distribution"] is not None)  # a redraw brought logprobs
    low = {"relevance": 0, "efficiency": 0}  # the lowest grade of both scales (face.datasets.crsarena.ASPECTS)
    for r in without:
        if policy == "parsed":  # the parsed integer of the first draw
            assert r["score"] == r["samples"][0] and r["fallback"] == "parsed_value_without_logprobs"
            assert r["n_valid"] == 1 and r["n_defaulted"] == 0
        elif policy == "redraw":  # invalid: invalid.fallback=drop leaves it out
            assert r["score"] is None or math.isnan(r["score"])  # (NaN is written as null)
            assert r["fallback"] == "no_logprobs" and r["n_valid"] == 0
        else:  # min: the lowest grade, whatever invalid.fallback says
            assert r["score"] == low[r["aspect"]] and r["n_defaulted"] == 1 and r["n_valid"] == 0
            assert r["fallback"] == f"no logprobs: scored {low[r['aspect']]}"
    assert usage["logprob_fallbacks"] == len(without)
    assert usage["defaulted_answers"] == sum(r["n_defaulted"] for r in recs)
