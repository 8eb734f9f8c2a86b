"""The instruction optimizer: UCB by hand, beam bookkeeping, reproducible minibatches, the stratified split,
checkpoints, the replay scorer, and the live loop on the scripted server (prompt versions and lineage read back
from MLflow, kill + resume, references to an optimized set)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from face.aspects import Aspect
from face.data.schema import Conversation, Turn
from face.data.split import split_conversations
from face.optimize import checkpoint
from face.optimize.bandit import Bandit, random_choice
from face.optimize.beam import BeamSearch, StopOptimization, minibatch
from face.optimize.checkpoint import Candidate, OptState, ResumeMismatch
from face.optimize.config import OptimizerConfig
from face.optimize.estimate import CostInputs, estimate, paper_setting
from face.optimize.items import Item, correlation, errors, ranks, reward, worst
from face.optimize.rewrites import Rewrite, instruction_text
from face.tracking.prompts import parse_set, set_template

ASPECT = Aspect("relevance", "turn", (0, 1, 2, 3), "Is it relevant?", {})


# ------------------------------------------------------------------ bandit

def test_ucb_bounds_and_choices_match_hand_computation():
    b = Bandit(3, c=1.0)
    assert b.bounds().tolist() == [math.inf] * 3 and b.choose_ucb() == 0  # unpulled arms first, lowest index
    rewards = {0: [0.5, 0.1], 1: [0.2], 2: [0.9]}
    seq = []

    def pull(a):
        seq.append(a)
        return rewards[a].pop(0)

    b.run(pull, 3)  # pulls 0, 1, 2 (each unpulled arm once, in order)
    assert seq == [0, 1, 2]
    # t = 3: bound_i = mean_i + sqrt(ln 3 / 1) = mean_i + 1.048147...
    bonus = math.sqrt(math.log(3))
    assert np.allclose(b.bounds(), [0.5 + bonus, 0.2 + bonus, 0.9 + bonus])
    assert b.choose_ucb() == 2
    b.update(0, 0.1)  # arm 0 now has mean 0.3 over 2 pulls; t = 4
    expect = [0.3 + math.sqrt(math.log(4) / 2), 0.2 + math.sqrt(math.log(4)), 0.9 + math.sqrt(math.log(4))]
    assert np.allclose(b.bounds(), expect)
    assert b.choose_ucb() == 2
    assert b.top(2) == [2, 0]  # by mean reward: 0.9, 0.3, 0.2
    # a larger c favours the arm with fewer pulls: arm 1 (0.2 + 4*1.177 = 4.91) over arm 0 (0.3 + 4*0.833 = 3.63)
    b.c = 4.0
    assert np.allclose(b.bounds()[1], 0.2 + 4 * math.sqrt(math.log(4)))
    c0 = Bandit(2, c=0.0)
    c0.update(0, 0.4)
    c0.update(1, 0.6)
    assert c0.choose_ucb() == 1  # c = 0: greedy


def test_uniform_allocation_is_round_robin_and_top_ranks_unpulled_last():
    b = Bandit(3, c=1.0).run(lambda a: [0.1, 0.5, 0.3][a], 7, "uniform")
    assert b.n.tolist() == [3, 2, 2]
    assert b.top(3) == [1, 2, 0]
    u = Bandit(3)
    u.update(2, -0.5)
    assert u.top(3) == [2, 0, 1]


def test_random_choice_draws_k_distinct_arms_uniformly_and_at_most_all():
    rng = np.random.default_rng(0)
    draws = [random_choice(16, 4, rng) for _ in range(4000)]
    assert all(len(set(d)) == 4 and d == sorted(d) and d[0] >= 0 and d[-1] < 16 for d in draws)
    counts = np.bincount(np.concatenate(draws), minlength=16)  # each arm expected 4000 * 4 / 16 = 1000 times
    assert stats.chisquare(counts).pvalue > 0.001
    assert random_choice(3, 5, rng) == [0, 1, 2]


# ------------------------------------------------------------------ items, rewards, errors

def test_rewards_errors_and_ranks():
    from scipy import stats

    rng = np.random.default_rng(1)
    x, y = rng.random(30), rng.integers(1, 4, 30).astype(float)
    assert np.allclose(ranks(y), stats.rankdata(y))
    assert correlation(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert correlation(x, y, "pearson") == pytest.approx(stats.pearsonr(x, y)[0])
    assert math.isnan(correlation(np.ones(5), np.arange(5.0))) and reward(np.ones(5), np.arange(5.0)) == 0.0
    pred, gold = np.array([3.0, 1.0, 2.0, np.nan]), np.array([1.0, 1.0, 2.0, 3.0])
    assert errors(pred, gold, "abs")[:3].tolist() == [2.0, 0.0, 0.0] and errors(pred, gold, "abs")[3] == np.inf
    assert worst(pred, gold, 2, "abs").tolist() == [3, 0]
    assert worst(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]), 1, "rank").tolist() == [0]


def test_minibatches_are_reproducible_from_the_seed():
    pool = np.arange(100)
    a = [minibatch(np.random.default_rng(7), pool, 20) for _ in range(2)]
    assert np.array_equal(a[0], a[1]) and len(set(a[0])) == 20
    assert not np.array_equal(a[0], minibatch(np.random.default_rng(8), pool, 20))
    assert sorted(minibatch(np.random.default_rng(7), pool[:5], 20)) == list(range(5))


# ------------------------------------------------------------------ split

def _convs(n_per_system=(10, 7, 4)):
    out = []
    for s, n in enumerate(n_per_system):
        for i in range(n):
            out.append(Conversation(f"c{s}_{i}", (Turn(0, "USER", "hi"), Turn(1, "ASST", "hello", {"relevance": 2})),
                                    {}, system=f"sys{s}"))
    return out


def test_stratified_split_has_no_conversation_on_both_sides_and_is_seeded():
    convs = _convs()
    for fold in (0, 1, 2):
        sp = split_conversations(convs, folds=3, fold=fold, dev_fraction=0.25, seed=3)
        sides = [set(sp.train), set(sp.dev), set(sp.test)]
        assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
        assert set().union(*sides) == {c.conv_id for c in convs}
        for s, n in enumerate((10, 7, 4)):  # every system is spread over the folds (stratified)
            in_test = sum(c.startswith(f"c{s}_") for c in sp.test)
            assert abs(in_test - n / 3) <= 1
    tests = [set(split_conversations(convs, 3, f, 0.0, 3).test) for f in range(3)]
    assert set().union(*tests) == {c.conv_id for c in convs} and sum(map(len, tests)) == len(convs)  # a partition
    assert split_conversations(convs, 3, 0, 0.25, 3) == split_conversations(list(reversed(convs)), 3, 0, 0.25, 3)
    assert split_conversations(convs, 3, 0, 0.25, 3) != split_conversations(convs, 3, 0, 0.25, 4)


# ------------------------------------------------------------------ beam bookkeeping with fakes

class FakeScorer:
    """Prediction = gold + noise whose size shrinks with the length of the instruction text."""

    def __init__(self, n=60):
        rng = np.random.default_rng(0)
        self.items = [Item(f"c{i}", 1, float(rng.integers(0, 4))) for i in range(n)]
        self.noise = rng.normal(size=n)

    def predict(self, cand, idx):
        gold = np.array([self.items[i].gold for i in idx])
        return gold + self.noise[idx] * 10.0 / len(cand.text)

    def predict_set(self, cands, idx):
        return np.mean([self.predict(c, idx) for c in cands], 0)

    def explain(self, cand, idx):
        return [{"conv_id": self.items[i].conv_id, "turn_ind": 1, "pred": 0.0, "gold": self.items[i].gold,
                 "context": "", "particles": []} for i in idx]


class FakeWriter:
    def __init__(self, cfg):
        self.cfg, self.calls = cfg, []

    def gradients(self, jobs):
        self.calls.append(("g", len(jobs)))
        return [[f"critique {j} of {c.cid}" for j in range(self.cfg.alpha)] for c, _ in jobs]

    def rewrites(self, jobs):
        self.calls.append(("r", len(jobs)))
        return [[f"{c.text} more{j} ({g})" for j in range(self.cfg.beta)] for c, g in jobs]


def _loop(cfg, tmp_path=None, on_round=None):
    scorer = FakeScorer()
    return BeamSearch(cfg, ASPECT, scorer, np.arange(40), np.arange(40, 60), FakeWriter(cfg),
                      checkpoint_dir=str(tmp_path) if tmp_path else None, on_round=on_round)


def test_beam_bookkeeping():
    cfg = OptimizerConfig(alpha=2, beta=3, beam=2, rounds=2, pulls=30, pull_minibatch=10, expand_minibatch=10, top_k=5)
    loop = _loop(cfg)
    state = loop.run(loop.new_state([Candidate("initial", "x")], {"k": 1}))
    # round 1: 1 parent × 2 × 3 = 6 new; round 2: 2 parents × 2 × 3 = 12 new
    assert [t["new_candidates"] for t in state.trajectory] == [6, 12]
    assert [t["candidates"] for t in state.trajectory] == [7, 14]
    assert len(state.candidates) == 19 and len(state.beam) == 2
    assert loop.writer.calls == [("g", 1), ("r", 2), ("g", 2), ("r", 4)]
    assert sum(len(v) for v in state.rewards.values()) == 60  # 30 pulls per round
    for c in state.candidates.values():
        if c.origin == "rewrite":
            assert c.parent in state.candidates and state.candidates[c.parent].round < c.round
            assert c.gradient_id.startswith(f"r{c.round}:{c.parent}:g")
    assert len(state.gradients) == 2 + 4
    final = loop.final_set(state)
    assert len(final) == 5 and [state.mean_reward(c.cid) for c in final] == sorted(
        [state.mean_reward(c.cid) for c in final], reverse=True)


def test_checkpoint_resume_equals_uninterrupted_and_refuses_another_config(tmp_path):
    cfg = OptimizerConfig(alpha=2, beta=2, beam=2, rounds=3, pulls=20, pull_minibatch=10, expand_minibatch=10)
    full = _loop(cfg).run(_loop(cfg).new_state([Candidate("initial", "x")], {"k": 1}))
    stop = OptimizerConfig(**{**cfg.__dict__, "stop_after_round": 1})
    loop = _loop(stop, tmp_path)
    with pytest.raises(StopOptimization):
        loop.run(loop.new_state([Candidate("initial", "x")], {"k": 1}))
    saved = checkpoint.load(tmp_path, "relevance")
    assert saved.round == 1 and saved.rng is not None
    resumed = _loop(cfg, tmp_path).run(saved)
    assert resumed.beam == full.beam and resumed.rewards == full.rewards
    assert [c.text for c in resumed.candidates.values()] == [c.text for c in full.candidates.values()]
    with pytest.raises(ResumeMismatch, match="optimizer.alpha|k"):
        checkpoint.check_same(saved, {"k": 2}, tmp_path)
    checkpoint.check_same(saved, {"k": 1}, tmp_path)
    assert OptState.from_json(json.loads((tmp_path / "relevance.json").read_text())).round == 3


def test_config_validation_and_cost_estimate():
    with pytest.raises(ValueError, match="optimizer.alpha"):
        OptimizerConfig(alpha=0)
    with pytest.raises(ValueError, match="^unknown setting optimizer.alpa; the settings of optimizer: name, alpha, "):
        OptimizerConfig.from_dict({"alpa": 2})
    p = paper_setting(OptimizerConfig(alpha=1, beta=1, beam=1))
    assert (p.alpha, p.beta, p.beam, p.ucb_c, p.pull_minibatch) == (4, 4, 4, 1.0, 20)
    from face.pipeline.estimate import Pricing

    est = estimate(p, CostInputs(1000, 500, 2.8, 5, 900.0, 300), Pricing()).set_index("stage")
    assert est.loc["gradients / round", "samples"] == 16 and est.loc["rewrites / round", "samples"] == 64
    assert est.loc["rewrites / round", "requests"] == 16
    assert est.loc["expand scoring / round", "samples"] == round(4 * 20 * 2.8 * 5)


def test_rewrite_rendering_and_set_templates():
    r = Rewrite.model_validate({"task": "Rate the particle.", "steps": [
        {"action": "Look at the  mention.", "check": "Does the particle name a movie?"},
        {"action": "Weigh feedback.", "check": "Does the particle get a positive reaction?"}]})
    text = instruction_text(r)
    assert text.splitlines()[0] == "Task: Rate the particle." and "Step 2: Weigh feedback." in text
    assert "Check: Does the particle name a movie?" in text
    pairs = [("a", "first\ntext"), ("r1c2", "second")]
    assert parse_set(set_template(pairs), "x") == pairs
    assert parse_set("just one", "p@3") == [("p@3", "just one")]


# ------------------------------------------------------------------ replay scorer = the released aggregation

def test_replay_scorer_matches_released_aggregation(data_dir):
    from face.data import CRSARENA_EVAL
    from face.datasets.crsarena import ASPECTS, load_conversations
    from face.optimize.items import items_for
    from face.optimize.scorers import ReplayScorer
    from face.pipeline.aggregate import aggregate
    from face.pipeline.released import load_scores

    convs = load_conversations(data_dir / CRSARENA_EVAL)[:30]
    for name in ("relevance", "efficiency"):
        a = ASPECTS[name]
        scores = load_scores(data_dir, [name], {c.conv_id for c in convs})
        items = items_for(a, convs)
        sc = ReplayScorer(scores, items, a.level)
        cov = sc.covered()
        preds = aggregate(scores, {name: a.level})
        table = preds.turn if a.level == "turn" else preds.dialogue.assign(turn_ind=-1)
        ref = {(r.conv_id, r.turn_ind): r.pred for r in table.itertuples()}
        got = sc.predict_set([Candidate(i, "") for i in sc.ids], cov)
        assert np.allclose(got, [ref[(items[i].conv_id, items[i].turn_ind)] for i in cov])


# ------------------------------------------------------------------ live loop on the scripted server

TINY = ["experiment=optimize_instructions", "aspects=[relevance]", "dataset.limit=8", "run_size=tiny",
        "optimizer.pulls=12", "optimizer.pull_minibatch=6", "optimizer.expand_minibatch=6", "optimizer.top_k=4"]


@pytest.fixture
def scripted():
    from face.testing.scripted import ScriptedServer

    with ScriptedServer() as info:
        yield info


def _server_overrides(server, cache):
    return ["llm=fake", "llm.server=null", f"llm.base_url={server.base_url}", f"paths.cache_dir={cache}"]



@pytest.mark.slow
@pytest.mark.usefixtures("mlflow_store")
def test_two_rounds_register_every_instruction_with_lineage(run_experiment, tmp_path):
    from mlflow.tracking import MlflowClient

    ran = run_experiment(*TINY, "llm=fake", "optimizer.rounds=2", "optimizer.alpha=2", "optimizer.beta=1",
                         "optimizer.beam=2")
    cfg, out = ran.cfg, ran.experiment
    assert len(out.tables["trajectory"]) == 2
    sets = json.loads(out.files["instructions"].read_text())
    assert 1 <= len(sets["relevance"]) <= 4 and all({"instruction_id", "text"} <= set(x) for x in sets["relevance"])
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("optimize_instructions").experiment_id])
    assert run.info.status == "FINISHED"
    # the job's candidates under a name of their own: face-opt-<aspect>-run-<first 8 characters of the run id>
    name = f"face-opt-relevance-run-{run.info.run_id[:8]}"
    names = {p.name for p in client.search_prompts(max_results=100)}
    assert names == {name, "face-opt-relevance-set"}
    versions = {int(v.version): v for v in client.search_prompt_versions(name)}
    assert sorted(versions) == list(range(1, 1 + 2 + 4 + 1))  # initial; round 1: 1 parent × 2 × 1; round 2: 2 × 2
    assert len({v.template for v in versions.values()}) == len(versions)  # one version per distinct text
    by_cid = {v.tags["candidate_id"]: v for v in versions.values()}
    assert by_cid["initial"].tags["parent_version"] == "none" and int(by_cid["initial"].version) == 1
    assert int(client.get_prompt_version(name, "initial").version) == 1
    for v in versions.values():
        assert v.tags["aspect"] == "relevance" and v.tags["run_id"] == run.info.run_id
        assert v.commit_message.startswith(f"{run.info.run_name}: round {v.tags['round']}: ")  # the job first
        if v.tags["candidate_id"] != "initial":
            parent = versions[int(v.tags["parent_version"])]
            assert parent.tags["candidate_id"] == v.tags["parent_id"]
            assert int(parent.tags["round"]) < int(v.tags["round"])
            assert f"rewrite of v{parent.version} ({parent.tags['candidate_id']})" in v.commit_message
            assert v.tags["gradient_id"].startswith(f"r{v.tags['round']}:{v.tags['parent_id']}:g")
            assert v.template.startswith("Task: ") and "Step 1: " in v.template
    # the final set: @best is its first instruction, the set's version lists its members in rank order
    final = sets["relevance"]
    best = client.get_prompt_version(name, "best")
    assert best.template == final[0]["text"] and int(best.version) == final[0]["prompt_version"]
    assert client.get_prompt(name).tags["run"] == run.info.run_id
    assert not {"round", "candidate_id", "sha256"} & set(client.get_prompt(name).tags)  # per version only
    job_set = client.get_prompt_version("face-opt-relevance-set", f"run-{run.info.run_id[:8]}")
    assert run.data.tags["prompt.relevance"] == f"face-opt-relevance-set@{job_set.version}"
    assert job_set.template == set_template([(x["instruction_id"], x["text"]) for x in final])
    assert job_set.tags["members"] == ",".join(f"{x['instruction_id']}:v{x['prompt_version']}" for x in final)
    assert run.data.tags["prompt.relevance"].startswith("face-opt-relevance-set@")
    arts = [f.path for f in client.list_artifacts(run.info.run_id, "optimized")]
    assert "optimized/instructions.json" in arts
    # MLflow metrics: the headline and the aspect's held-out Spearman; every other number in numbers.json
    assert set(run.data.metrics) == {"summary.final_heldout_spearman", "summary.initial_heldout_spearman",
                                     "summary.gain_heldout_spearman", "vs_human.turn.relevance.heldout.spearman"}
    numbers = json.loads(Path(client.download_artifacts(run.info.run_id, "numbers.json", str(tmp_path))).read_text())
    assert numbers["heldout.relevance.test_final_spearman"] == run.data.metrics[
        "vs_human.turn.relevance.heldout.spearman"] and numbers["optimizer.llm_calls"] > 0
    assert "estimate.this_run.total.samples" in numbers and numbers["estimate.http_requests"] > 0

    # use the result: by file, by registry name@version, by run id
    from face.pipeline.method import Face

    ref = run.data.tags["prompt.relevance"]
    for spec in ({"source": "file", "file": str(out.files["instructions"])}, {"source": "mlflow", "ref": ref},
                 {"source": "mlflow", "ref": "face-opt-{aspect}-set@latest"},
                 {"source": "mlflow", "ref": f"runs:/{run.info.run_id}"}):
        got = Face(instructions=spec)._instructions(tmp_path, "relevance")
        assert [i.text for i in got] == [x["text"] for x in sets["relevance"]], spec
    with pytest.raises(ValueError, match="needs"):
        Face(instructions={"source": "mlflow"})


@pytest.mark.slow
def test_kill_after_round_one_and_resume_sends_nothing_twice(run_experiment, scripted, tmp_path):
    common = [*TINY, "optimizer.rounds=2", "optimizer.alpha=2", "optimizer.beta=1", "optimizer.beam=2",
              "tracking=none"]
    from face.testing.scripted import ScriptedServer

    def run(server, cache: str, *extra: str, run_dir: str):
        return run_experiment(*common, *_server_overrides(server, tmp_path / cache), *extra, tracking=False,
                              run_dir=run_dir).experiment

    with ScriptedServer() as ref_info:  # the uninterrupted run, on its own server and cache
        ref = run(ref_info, "cache_ref", run_dir="ref")
    srv = scripted
    first = run(srv, "cache", "optimizer.stop_after_round=1", run_dir="first")
    assert first.stopped
    ckpt = first.files["checkpoint"]
    assert checkpoint.load(ckpt, "relevance").round == 1
    server = _server_of(srv)
    sent_before = {r["hash"] for r in server.ok_requests()}
    n_before = len(server.log)
    with pytest.raises(Exception, match="another configuration"):
        run(srv, "cache", f"optimizer.resume={ckpt}", "optimizer.alpha=1", run_dir="other")
    resumed = run(srv, "cache", f"optimizer.resume={ckpt}", run_dir="resumed")
    new = server.log[n_before:]
    assert new, "round 2 needs new requests"
    assert not ({r["hash"] for r in new} & sent_before), "a request answered before was sent again"
    assert json.loads(resumed.files["instructions"].read_text()) == json.loads(ref.files["instructions"].read_text())
    pd.testing.assert_frame_equal(resumed.results.drop(columns=["llm_calls", "cost_usd"]),
                                  ref.results.drop(columns=["llm_calls", "cost_usd"]))


_SERVERS: dict = {}


def _server_of(info):
    return _SERVERS[info.base_url]


@pytest.fixture(autouse=True)
def _track_servers(monkeypatch):
    from face.testing import scripted as mod

    orig = mod.ScriptedServer.start

    def start(self):
        info = orig(self)
        _SERVERS[info.base_url] = self
        return info

    monkeypatch.setattr(mod.ScriptedServer, "start", start)
    yield
    _SERVERS.clear()


def test_dry_run_prints_the_paper_setting_and_sends_nothing(run_experiment, capsys):
    ran = run_experiment(*TINY, "llm=fake", "llm.dry_run=true", tracking=False)
    out = ran.experiment
    assert out.dry_run
    text = capsys.readouterr().out
    assert "paper setting" in text and "per round" in text and "total" in text
    costs = out.tables["costs"]
    paper = costs[(costs["setting"] == "paper setting")].set_index("stage")
    assert paper.loc["gradients / round", "samples"] == 16 and paper.loc["rewrites / round", "samples"] == 64


@pytest.mark.slow
def test_optimize_selection_small(run_experiment):
    ran = run_experiment("experiment=optimize_selection", "aspects=[relevance,efficiency]", "selection.repeats=2",
                         "selection.budgets=[8,32]", "selection.ucb_cs=[1.0]", "optimizer.pulls=32", tracking=False,)
    out = ran.experiment
    head = out.tables["headline"].set_index("aspect")
    assert set(head.index) == {"relevance", "efficiency"}
    assert (head["best"] >= head["ucb"] - 1e-9).all() and (head["best"] >= head["full"] - 1e-9).all()
    assert (head["ucb_pulls"] == 32).all()
    runs = out.tables["runs"]
    assert (runs["regret"] >= -1e-9).all()
    assert {"ucb", "uniform", "random", "full"} <= set(runs["policy"])
    assert Path(out.out_dir, "headline.csv").exists() and Path(out.out_dir, "figures",
                                                                  "heldout_vs_budget.png").exists()


# ------------------------------------------------------------------ sweeps (slow: 4 jobs through Hydra)

@pytest.mark.slow
def test_multirun_is_one_parent_run_with_a_named_child_per_job_and_the_sweep_report(optimizer_sweep):
    """The sweep of issue 22 (alpha=1,2 beta=1 beam=1,2: conftest's OPTIMIZER_SWEEP, through ``scripts/run.py -m``
    from the repository): one MLflow parent run named after the swept keys, 4 FINISHED children named by alpha,
    beta and beam, each with the headline summary metric; the report (read back from MLflow) in the sweep directory
    and on the parent; nothing written into the repository."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    assert optimizer_sweep.code == 0, optimizer_sweep.err[-3000:]
    uri = optimizer_sweep.uri
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("optimize_instructions").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 5 and len(children) == 4
    assert parent.info.run_name == "optimize_instructions sweep: alpha x beam"
    assert parent.info.status == "FINISHED" and all(r.info.status == "FINISHED" for r in children)
    names = sorted(r.info.run_name for r in children)
    for (a, b), name in zip([(1, 1), (1, 2), (2, 1), (2, 2)], names):
        assert name == f"a={a} b={b} · optimize_instructions"  # what differs first, within the default width
    for r in children:
        assert {"summary.final_heldout_spearman", "summary.initial_heldout_spearman"} <= set(r.data.metrics)
        assert r.data.params["optimizer.alpha"] in ("1", "2")  # integers as integers, not 1.0
        assert [d.dataset.name for d in r.inputs.dataset_inputs] == ["CRSArena-Eval"]
    assert not any(k.startswith("llm_score") for k in children[0].data.metrics)  # per stage: in the artifact
    # the report: from the children, in the sweep directory and on the parent
    sweep = optimizer_sweep.sweep
    jobs = pd.read_csv(sweep / "sweep_jobs.csv")
    by_name = {r.info.run_name: r.data.metrics["summary.final_heldout_spearman"] for r in children}
    assert dict(zip(jobs["run"], jobs["summary.final_heldout_spearman"])) == pytest.approx(by_name)
    assert parent.data.metrics["summary.final_heldout_spearman"] == pytest.approx(max(by_name.values()))
    assert {k: parent.data.params[k] for k in ("optimizer.alpha", "optimizer.beam", "optimizer.beta", "llm")} == {
        "optimizer.alpha": "1,2", "optimizer.beam": "1,2", "optimizer.beta": "1", "llm": "fake"}
    assert "scripted-model (scripted)" in (sweep / "sweep_report.md").read_text()
    logged = {f.path for f in client.list_artifacts(parent.info.run_id, "sweep_report")}
    assert {"sweep_report/sweep_report.md", "sweep_report/sweep_jobs.csv", "sweep_report/sweep_report.png"} <= logged
    assert client.get_experiment_by_name("optimize_instructions").tags[
        "mlflow.experiment.primaryMetric.name"] == "summary.final_heldout_spearman"
    assert all((sweep / n / "results" / "heldout.csv").exists() for n in "0123")  # each job its own tables
    assert optimizer_sweep.git_after == optimizer_sweep.git_before  # no job wrote results/ (job 0 once did)
