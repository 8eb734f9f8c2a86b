"""Loaders read every shipped file into typed records, and bad input fails with one clear DataError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from face.data import (
    ARENA_VOTES,
    CRSARENA_EVAL,
    PUBLISHED_TABLE,
    RELEASED_PARTICLES,
    USR_FILES,
    released_instructions_file,
    released_scores_file,
)
from face.data.schema import ASSISTANT, DIALOGUE_ACTS, USER
from face.datasets.arena import load_votes
from face.datasets.crsarena import ASPECTS, CRSArenaEval, load_conversations, load_published_table
from face.datasets.face_released import (
    load_instructions,
    load_particle_scores,
    load_released_particles,
)
from face.datasets.usr import USR_ASPECTS, load_usr
from face.errors import DataError


def test_crsarena_eval_has_467_conversations_9_crss_and_4473_utterances(data_dir):
    convs = load_conversations(data_dir / CRSARENA_EVAL)
    assert len(convs) == 467
    assert sum(len(c.turns) for c in convs) == 4473
    assert len({c.system for c in convs}) == 9
    assert {c.split for c in convs} == {"redial", "opendialkg"}
    assert sum(1 for c in convs if c.split == "redial") == 267


def test_crsarena_eval_records_equal_the_raw_json(data_dir):
    """Every conversation, turn, role, utterance and label as the json module reads the file."""
    raw = json.loads((data_dir / CRSARENA_EVAL).read_text())
    convs = load_conversations(data_dir / CRSARENA_EVAL)
    assert [c.conv_id for c in convs] == [r["conv_id"] for r in raw]
    role = {"USER": USER, "ASST": ASSISTANT}
    for c, r in zip(convs, raw):
        system, split = r["conv_id"].split("_")[:2]  # ids are {crs}_{dataset}_{uuid}
        assert (c.system, c.split) == (f"{system}_{split}", split)
        assert c.labels == r["dial_level_aggregated"]
        assert [(t.turn_ind, t.role, t.utterance, t.labels) for t in c.turns] == [
            (t["turn_ind"], role[t["role"]], t["utterance"], t.get("turn_level_aggregated") or {})
            for t in r["dialogue"]]


def test_select_filters_by_system_split_and_limit(data_dir):
    convs = load_conversations(data_dir / CRSARENA_EVAL)
    ids = [c.conv_id for c in convs]

    def select(convs, **selection):
        return CRSArenaEval(**selection).select(convs)

    kbrd = select(convs, systems=["kbrd"])
    # 61 kbrd_redial + 59 kbrd_opendialkg conversations in the file (counted from the conversation ids)
    assert [c.conv_id for c in kbrd] == [i for i in ids if i.startswith("kbrd_")] and len(kbrd) == 61 + 59
    kbrd_redial = select(convs, systems=["kbrd_redial"])
    assert [c.conv_id for c in kbrd_redial] == [i for i in ids if i.startswith("kbrd_redial_")]
    assert len(select(convs, splits=["opendialkg"])) == 467 - 267
    assert [c.conv_id for c in select(convs, splits=["redial"], limit=3)] == [
        i for i in ids if i.split("_")[1] == "redial"][:3]  # the first ones in file order


def test_released_particles_2235_turns_6274_particles(data_dir):
    rows = load_released_particles(data_dir / RELEASED_PARTICLES)
    assert len(rows) == 2235
    assert sum(len(r.particles) for r in rows) == 6274
    assert {p.dialogue_act for r in rows for p in r.particles} <= set(DIALOGUE_ACTS)
    raw = [json.loads(line) for line in (data_dir / RELEASED_PARTICLES).read_text().splitlines()]
    assert [(r.conv_id, r.turn_ind, r.assistant_utterance,
             [(p.dialogue_act, p.mention, p.user_feedback) for p in r.particles]) for r in rows] == [
        (o["conv_id"], o["turn_ind"], o["assistant_utterance"],
         [(p["dialogue_act"], p["particle"], p["user_feedback"]) for p in o["particles"]]) for o in raw]


@pytest.mark.parametrize("aspect", list(ASPECTS))
def test_released_scores_have_16_instructions_per_particle(data_dir, aspect):
    df = load_particle_scores(data_dir / released_scores_file(aspect), aspect)
    per_particle = df.groupby(["conv_id", "turn_ind", "particle_ind"], observed=True).size()
    assert set(per_particle) == {16}
    assert df["score"].between(0, 4).all()
    ids = {i.instruction_id for i in load_instructions(data_dir / released_instructions_file(aspect))}
    assert set(df["instruction_id"].unique()) == ids and len(ids) == 16


def test_published_table_has_six_methods_two_splits(data_dir):
    df = load_published_table(data_dir / PUBLISHED_TABLE)
    assert set(df["split"]) == {"redial", "opendialkg"}
    assert {"FACE", "FACE w/o train", "G-Eval", "LLM-Direct", "LLM-CoT+ICL", "UniEval"} == set(df["method"])
    face = df[(df["method"] == "FACE") & (df["split"] == "redial") & (df["aspect"] == "dialogue_overall")]
    assert face.set_index("coefficient")["value"].to_dict() == {"pearson": 0.712, "spearman": 0.668}
    assert df[df["method"] == "UniEval"]["value"].isna().any()  # not reported values stay missing


def test_arena_votes(data_dir):
    votes = [v for s, f in ARENA_VOTES.items() for v in load_votes(data_dir / f, s)]
    assert len(votes) == 185
    assert all(v.winner in (None, v.crs1, v.crs2) for v in votes)


@pytest.mark.parametrize("name,n_responses", [("topical_chat", 6), ("persona_chat", 5)])
def test_usr_every_annotated_response_with_its_mean_ratings(data_dir, name, n_responses):
    convs = load_usr(data_dir / USR_FILES[name], exclude_ground_truth=False)
    assert len(convs) == 60 * n_responses
    raw = json.loads((data_dir / USR_FILES[name]).read_text())
    items = iter(convs)
    for i, rc in enumerate(raw):
        for rr in rc["responses"]:
            c = next(items)
            assert c.conv_id.startswith(f"{i}:") and c.system == rr["model"]
            assert c.turns[-1].utterance == rr["response"].strip() and len(rr["Overall"]) == 3
            assert c.turns[-1].labels == {a: pytest.approx(sum(rr[k]) / len(rr[k]))
                                          for a, k in zip(["understandable", "natural", "maintains_context",
                                                           "engaging", "uses_knowledge", "overall"], USR_ASPECTS)}


@pytest.mark.parametrize("name,n_items", [("topical_chat", 60 * 5), ("persona_chat", 60 * 4)])
def test_usr_items_are_context_response_pairs_without_the_ground_truth(data_dir, name, n_items):
    raw = json.loads((data_dir / USR_FILES[name]).read_text())
    convs = load_usr(data_dir / USR_FILES[name])
    assert len(convs) == n_items  # the original ground truth is the reference, not an item (USR's protocol)
    c = next(c for c in convs if c.conv_id.startswith("0:") and c.system == raw[0]["responses"][1]["model"])
    last = c.turns[-1]
    assert last.role == ASSISTANT and last.utterance == raw[0]["responses"][1]["response"].strip()
    assert [t.role for t in c.turns[-3:]] == [ASSISTANT, USER, ASSISTANT]
    assert c.evaluated_turns() == [last]  # only the response is judged; the context is history
    overall = raw[0]["responses"][1]["Overall"]
    assert last.labels["overall"] == pytest.approx(sum(overall) / len(overall))
    assert c.meta["reference"] == raw[0]["responses"][0]["response"].strip()
    assert raw[0]["responses"][0]["model"] == "Original Ground Truth"


# ------------------------------------------------------------------ malformed input

GOOD = {"conv_id": "kbrd_redial_x", "dialogue": [
    {"turn_ind": 0, "role": "USER", "utterance": "hi"},
    {"turn_ind": 1, "role": "ASST", "utterance": "hello", "turn_level_aggregated": {"relevance": 2}}],
    "dial_level_aggregated": {"understanding": 1}}


def _write(tmp_path: Path, obj, name="conv.json") -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def _bad(tmp_path, obj, *expected: str):
    with pytest.raises(DataError) as e:
        load_conversations(_write(tmp_path, obj))
    msg = str(e.value)
    assert "conv.json" in msg
    for part in expected:
        assert part in msg, msg
    return msg


def test_good_minimal_conversation_loads(tmp_path):
    [c] = load_conversations(_write(tmp_path, [GOOD]))
    assert c.labels == {"understanding": 1.0} and c.turns[1].labels == {"relevance": 2.0}


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match="nope.json.*file not found"):
        load_conversations(tmp_path / "nope.json")


def test_malformed_json_names_line(tmp_path):
    _bad(tmp_path, '[{"conv_id": "a",', "malformed JSON", "line 1")


def test_missing_key_names_conversation(tmp_path):
    bad = {**GOOD}
    del bad["dial_level_aggregated"]
    _bad(tmp_path, [bad], "'kbrd_redial_x'", "missing key 'dial_level_aggregated'")


def test_wrong_type_names_conversation_and_turn(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["dialogue"][1]["turn_ind"] = "one"
    _bad(tmp_path, [bad], "'kbrd_redial_x'", "turn 2", "expected an integer")  # the 2nd entry: from 1


def test_wrong_label_type(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["dial_level_aggregated"]["understanding"] = "high"
    _bad(tmp_path, [bad], "understanding", "expected a number")


def test_unknown_aspect(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["dial_level_aggregated"]["charisma"] = 1
    _bad(tmp_path, [bad], "unknown aspect 'charisma'")


def test_non_alternating_roles(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["dialogue"][1]["role"] = "USER"
    _bad(tmp_path, [bad], "roles do not alternate", "turns with turn_ind 0 and 1")


def test_unknown_role(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["dialogue"][1]["role"] = "BOT"
    _bad(tmp_path, [bad], "unknown role 'BOT'")


def test_empty_dialogue(tmp_path):
    _bad(tmp_path, [{**GOOD, "dialogue": []}], "empty dialogue", "'kbrd_redial_x'")


def test_top_level_not_a_list(tmp_path):
    _bad(tmp_path, {"conv_id": "x"}, "expected a list")


def test_duplicate_conversation_id(tmp_path):
    _bad(tmp_path, [GOOD, GOOD], "duplicate conversation id")


def test_scores_file_bad_line_is_named(tmp_path):
    p = tmp_path / "relevance.jsonl"
    good = {"conv_id": "a_redial_1", "turns": {"1": {"particles": {"0": {"itr1": 1.0}}}}}
    bad = {"conv_id": "a_redial_2", "turns": {"1": {"particles": {"0": {"itr1": "high"}}}}}
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"relevance.jsonl \[line 2, conversation 'a_redial_2', turn 1, particle 0, "
                                        r"instruction 'itr1'\]: expected a number"):
        load_particle_scores(p, "relevance")
    p.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(DataError, match=r"\[line 2\]: malformed JSON"):
        load_particle_scores(p, "relevance")
    with pytest.raises(DataError, match="unknown aspect 'charm'"):
        load_particle_scores(p, "charm")


def test_particles_unknown_act_is_named(tmp_path):
    p = tmp_path / "particles.jsonl"
    p.write_text(json.dumps({"conv_id": "a", "turn_ind": 1, "assistant_utterance": "x",
                             "particles": [{"particle_ind": 0, "dialogue_act": "joke", "particle": "x",
                                            "user_feedback": "y"}]}) + "\n")
    with pytest.raises(DataError, match="line 1, conversation 'a', turn 1, particle 0.*unknown dialogue act 'joke'"):
        load_released_particles(p)


def test_votes_with_bad_winner_and_missing_column(tmp_path):
    p = tmp_path / "votes.csv"
    p.write_text("session_id,user_id,crs1,crs2,vote\ns,u,a,b,c\n")
    with pytest.raises(DataError, match=r"votes.csv \[line 2\].*neither 'tie'"):
        load_votes(p, "open")
    p.write_text("session_id,user_id,crs1,vote\n")
    with pytest.raises(DataError, match="missing columns"):
        load_votes(p, "open")


def test_usr_missing_ratings(tmp_path):
    p = _write(tmp_path, [{"context": "a\nb", "fact": "f", "responses": [{"response": "r", "model": "m"}]}], "usr.json")
    with pytest.raises(DataError, match=r"context 0, response 0.*missing key 'Understandable'"):
        load_usr(p)


# ---------------------------------------------------------------- an aspects file: grades, and the old key "levels"
_ASPECT = """\
- name: explainability
  level: turn
  scale: [0, 1, 2]
  definition: Does the assistant say why it recommends what it recommends?
  {key}: {{0: No reason., 1: A vague reason., 2: A specific reason.}}
  instructions: ["Rate the reason."]
"""


def test_an_aspects_files_grades_reach_the_prompt_lines_and_the_old_key_is_read_with_a_warning(tmp_path, capsys):
    from face.datasets.chatlogs import load_aspects

    new, old = tmp_path / "new.yaml", tmp_path / "old.yaml"
    new.write_text(_ASPECT.format(key="grades"))
    old.write_text(_ASPECT.format(key="levels"))
    (a,) = load_aspects(new)
    assert a.grades == {0: "No reason.", 1: "A vague reason.", 2: "A specific reason."}
    assert a.grade_lines() == "- 0: No reason.\n- 1: A vague reason.\n- 2: A specific reason."
    assert "warning:" not in capsys.readouterr().err
    (b,) = load_aspects(old)
    assert b == a and b.grades == a.grades  # the old name means the same
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "'levels' is now called 'grades'" in err and "old.yaml" in err
    both = tmp_path / "both.yaml"
    both.write_text(_ASPECT.format(key="grades") + "  levels: {0: x}\n")
    with pytest.raises(DataError, match=r"both 'levels' and 'grades'"):
        load_aspects(both)
