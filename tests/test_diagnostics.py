"""Diagnostics tables against hand counts and against the raw released files read with json."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from face.data.schema import Conversation, Particle, Turn
from face.report.diagnostic_report import diagnose, patterns


def _conv(cid, system, n_turns):
    turns = []
    for k in range(n_turns):
        turns += [Turn(2 * k, "USER", "u"), Turn(2 * k + 1, "ASST", "a")]
    return Conversation(cid, tuple(turns), system=system)


def test_patterns_by_hand():
    convs = [_conv("a", "s1", 2), _conv("b", "s1", 2), _conv("c", "s2", 1)]
    rec, ask = (lambda m: Particle("recommendation", m, "")), (lambda m: Particle("preference elicitation", m, ""))
    particles = {("a", 1): (rec("Heat"),), ("a", 3): (ask("older?"), rec("heat ")),  # recommends first, repeats Heat
                 ("b", 1): (ask("genre?"),), ("b", 3): (rec("Alien"),),  # asks first
                 ("c", 1): (ask("mood?"),)}  # never recommends
    p = patterns(particles, convs).set_index("system")
    assert p.loc["s1", "recommends_before_asking"] == 0.5 and p.loc["s2", "recommends_before_asking"] == 0.0
    assert p.loc["s1", "repeated_recommendations"] == pytest.approx(1 / 3)  # 3 recommendations, 1 a repeat
    assert p.loc["s1", "particles_per_turn"] == pytest.approx(5 / 4) and p.loc["s1", "conversations"] == 2


def test_mean_particle_score_by_act_equals_the_raw_files(data_dir):
    from face.data import CRSARENA_EVAL, RELEASED_PARTICLES, released_scores_file
    from face.datasets.crsarena import load_conversations
    from face.datasets.face_released import load_particle_scores, load_released_particles

    convs = load_conversations(data_dir / CRSARENA_EVAL)[:30]
    ids = {c.conv_id for c in convs}
    scores = load_particle_scores(data_dir / released_scores_file("relevance"), "relevance")
    scores = scores[scores["conv_id"].isin(ids)]
    parts = {(r.conv_id, r.turn_ind): r.particles for r in load_released_particles(data_dir / RELEASED_PARTICLES)
             if r.conv_id in ids}
    d = diagnose(scores, parts, convs)
    # independently: the raw JSONL files, a particle's score = mean over its instructions
    acts = {}
    for line in (data_dir / RELEASED_PARTICLES).read_text().splitlines():
        r = json.loads(line)
        if r["conv_id"] in ids:
            for i, p in enumerate(r["particles"]):
                acts[(r["conv_id"], r["turn_ind"], i)] = p["dialogue_act"]
    system = {c.conv_id: c.system for c in convs}
    rows = []
    for line in (data_dir / released_scores_file("relevance")).read_text().splitlines():
        r = json.loads(line)
        if r["conv_id"] in ids:
            for t, turn in r["turns"].items():
                for pi, per in turn["particles"].items():
                    key = (r["conv_id"], int(t), int(pi))
                    rows.append((system[r["conv_id"]], acts[key], sum(per.values()) / len(per)))
    want = pd.DataFrame(rows, columns=["system", "act", "score"]).groupby(["system", "act"])["score"].mean()
    got = d["by_act"][d["by_act"]["aspect"] == "relevance"].set_index(["system", "dialogue_act"])["mean_score"]
    assert len(got) == len(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value)


@pytest.mark.parametrize("record, message", [
    ({"label": 3}, "run settings without a 'label' string"),
    ([], "run settings without a 'label' string"),
    ({"label": "x", "aspects": [{"name": "a", "level": "turn"}]}, "a malformed aspect in 'aspects'"),
])
def test_a_malformed_run_settings_file_is_one_clear_data_error(tmp_path, record, message):
    from face.errors import DataError
    from face.report.diagnostic_report import read_run_settings

    path = tmp_path / "run_settings.json"
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match=message):
        read_run_settings(path)


def test_run_settings_keep_only_instruction_sets_that_are_mappings_of_text(tmp_path):
    from face.report.diagnostic_report import read_run_settings

    path = tmp_path / "run_settings.json"
    path.write_text(json.dumps({"label": "x", "instructions": {"relevance": {"i1": "Rate it", "i2": 7},
                                                                "novelty": ["not", "a", "set"]}}))
    assert read_run_settings(path)["instructions"] == {"relevance": {"i1": "Rate it", "i2": "7"}}
