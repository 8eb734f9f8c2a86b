"""Issue 21, item 5 -- strict, helpful input: every malformed conversation file, bad ``--aspects`` and broken run
directory is refused in one line naming the file, the conversation (or line) and the field, with exit 2 and no
file changed outside the case's temp dir; through ``face evaluate`` and ``scripts/run.py`` (``dataset=chat_logs
dataset.path=`` and ``dataset.file=``). Valid files users have -- a byte-order mark, OpenAI's multi-part content,
integer ids -- load, with their text and ids as written.

Every case runs in-process (``tests/reliability.py``) and is refused before any LLM is needed."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from reliability import entry_argv, refused, run

from face.datasets.chatlogs import load_logs
from face.datasets.crsarena import load_conversations
from face.errors import DataError

# the reliability suite (issue 21): in-process, but ~150 cases; run with the slow tests, one at a time, so that
# no other test writes into the project tree while a case checks that nothing outside its temp dir changed
pytestmark = pytest.mark.slow

CHAT = {"id": "c1", "system": "crs-a", "messages": [
    {"role": "user", "content": "Any good heist movies?"},
    {"role": "assistant", "content": "Try Heat (1995)."},
    {"role": "user", "content": "Seen it."},
    {"role": "assistant", "content": "Then Ronin (1998)."}]}
ARENA = {"conv_id": "mycrs_x", "dialogue": [
    {"turn_ind": 0, "role": "USER", "utterance": "Any good heist movies?"},
    {"turn_ind": 1, "role": "ASST", "utterance": "Try Heat (1995)."}]}


def _with(base: dict, *path_value) -> list:
    """[a deep copy of base with path -> value set], dumped by ``json.dumps`` (NaN, Infinity and lone surrogates
    come out as JSON's NaN, Infinity and ``\\ud800`` escapes)."""
    c = copy.deepcopy(base)
    for path, value in zip(path_value[::2], path_value[1::2]):
        obj = c
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return [c]


nan, inf = float("nan"), float("inf")
LONE = "Try Heat \ud800 (1995)."  # a lone surrogate: json.dumps writes it as the escape \ud800
MULTI_IMAGE = [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "http://x/p.png"}}]

# name -> (file content: an object to json.dumps, or raw str/bytes; the entry points; words the line must say)
# entry points: face = `face evaluate`, chat = run.py dataset=chat_logs dataset.path=, file = run.py dataset.file=
FILES = {
    "id_infinity": (_with(CHAT, ["id"], inf), "face chat", ["conversation 1", "conversation id", "Infinity"]),
    "id_nan": (_with(CHAT, ["id"], nan), "face chat", ["conversation 1", "conversation id", "got NaN"]),
    "id_object": (_with(CHAT, ["id"], {"a": 1}), "face chat", ["conversation 1", "key 'id'", "got an object"]),
    "id_false": (_with(CHAT, ["id"], False), "face chat", ["conversation 1", "key 'id'", "got false"]),
    "id_float": (_with(CHAT, ["id"], 1.5), "face", ["conversation id", "a non-integer number (1.5)"]),
    "id_list": (_with(CHAT, ["id"], [1]), "face", ["conversation id", "got a list"]),
    "id_blank": (_with(CHAT, ["id"], "  "), "face", ["conversation 1", "empty conversation id"]),
    "system_object": (_with(CHAT, ["system"], {"a": 1}), "face chat", ["(c1)", "system name", "got an object"]),
    "system_true": (_with(CHAT, ["system"], True), "face", ["(c1)", "key 'system'", "got true"]),
    "system_nan": (_with(CHAT, ["system"], nan), "chat", ["(c1)", "system name", "got NaN"]),
    "arena_conv_id_null": (_with(ARENA, ["conv_id"], None), "face file",
                           ["conv_id must be a string or an integer", "got null"]),
    "arena_conv_id_infinity": (_with(ARENA, ["conv_id"], inf), "face file", ["conv_id", "got Infinity"]),
    "arena_conv_id_float": (_with(ARENA, ["conv_id"], 3.0), "file", ["conv_id", "a non-integer number (3.0)"]),
    "arena_system_list": (_with(ARENA, ["system"], ["a"]), "face file", ["'mycrs_x'", "system name", "a list"]),
    "arena_empty_utterance": (_with(ARENA, ["dialogue", 1, "utterance"], ""), "face chat file",
                              ["conversation 'mycrs_x', turn 2 (turn_ind 1)", "empty utterance"]),
    "arena_blank_utterance": (_with(ARENA, ["dialogue", 0, "utterance"], " \n\t"), "face file",
                              ["conversation 'mycrs_x', turn 1 (turn_ind 0)", "empty utterance"]),
    "chat_blank_message": (_with(CHAT, ["messages", 3, "content"], "\t "), "face chat",
                           ["(c1), message 4", "empty message"]),
    "multipart_blank": (_with(CHAT, ["messages", 1, "content"], [{"type": "text", "text": " "}]), "face",
                        ["(c1), message 2", "empty message"]),
    "multipart_image": (_with(CHAT, ["messages", 1, "content"], MULTI_IMAGE), "face chat",
                        ["(c1), message 2, content part 2", "'image_url'", "only text parts"]),
    "multipart_not_object": (_with(CHAT, ["messages", 1, "content"], ["hi"]), "face",
                             ["(c1), message 2, content part 1", "'type'"]),
    "multipart_text_not_string": (_with(CHAT, ["messages", 1, "content"], [{"type": "text", "text": 5}]), "face",
                                  ["message 2, content part 1", "key 'text'", "expected a string"]),
    "content_null": (_with(CHAT, ["messages", 1, "content"], None), "face chat",
                     ["(c1), message 2, content", "got null"]),
    "role_object": (_with(CHAT, ["messages", 1, "role"], {}), "face", ["(c1), message 2", "unknown role"]),
    "lone_surrogate_message": (_with(CHAT, ["messages", 3, "content"], LONE), "face chat",
                               ["(c1), message 4", "lone surrogate", "character 9"]),
    "lone_surrogate_utterance": (_with(ARENA, ["dialogue", 1, "utterance"], LONE), "face chat file",
                                 ["conversation 'mycrs_x', turn 2 (turn_ind 1)", "lone surrogate"]),
    "lone_surrogate_id": (_with(CHAT, ["id"], "c\udfff"), "face", ["conversation 1", "lone surrogate"]),
    "integer_of_5000_digits": ('[{"id": ' + "7" * 5000 + ', "messages": []}]', "face chat file",
                               ["malformed JSON", "4300 digits"]),
    "integer_of_5000_digits_on_line_2": ('[\n {"id": ' + "7" * 5000 + ',\n  "messages": []}\n]\n', "face",
                                        ["malformed JSON", "value has 5000 digits"]),
    "nested_too_deeply": ("[" * 100_000, "face chat file", ["malformed JSON", "nested too deeply"]),
    "id_1_and_string_1": (_with(CHAT, ["id"], 1) + _with(CHAT, ["id"], "1"), "face chat",
                          ["conversation '1'", "duplicate conversation id"]),
    "not_utf8_on_line_2": (json.dumps(CHAT).encode() + b"\n" + json.dumps(CHAT).encode()[:-3] + b"\xff\"}\n",
                           "face chat", ["line 2", "not UTF-8 text"]),
}
ARGS = {  # name -> (entry point: face / chat / file, argv after the file, words)
    "aspects_empty": ("face", ["--aspects", ""], ["--aspects '' names no aspect", "relevance"]),
    "aspects_commas": ("face", ["--aspects", ",,"], ["--aspects ',,' names no aspect"]),
    "aspects_trailing_comma": ("face", ["--aspects", "relevance,"], ["--aspects 'relevance,'", "empty name"]),
    "aspects_unknown": ("face", ["--aspects", "relevance,humour"],
                        ["no aspect 'humour'", "task_completion", "dialogue_overall"]),
    # every misspelled name, and the valid ones closest first, as a misspelled config name lists them
    "aspects_misspelled": ("face", ["--aspects", "relevanse,efficency"],
                           ["no aspect 'relevanse', 'efficency'; its aspects, closest first: efficiency, relevance, "]),
    "aspects_twice": ("face", ["--aspects", "relevance,relevance"], ["relevance named twice"]),
    "aspects_alias_twice": ("face", ["--aspects", "dialog_overall,dialogue_overall"], ["dialogue_overall named twice"]),
    "run_aspects_empty_list": ("chat", ["aspects=[]"], ["aspects=[] names no aspect", "relevance"]),
    "run_aspects_twice": ("file", ["aspects=[relevance,relevance]"], ["relevance named twice"]),
}


def _write(tmp: Path, content) -> Path:
    p = tmp / "logs.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        p.write_text(json.dumps(content), encoding="utf-8")
    return p


def _argv(entry: str, path: Path, tmp: Path, data_dir: Path, extra: list[str] = ()) -> tuple[str, list[str]]:
    if entry == "face":
        return "face", [*entry_argv("face", tmp, f"paths.data_dir={data_dir}", f"paths.cache_dir={tmp / 'cache'}",
                                    logs=path), *extra]
    source = ["dataset=chat_logs", f"dataset.path={path}"] if entry == "chat" else [f"dataset.file={path}",
                                                                                   "dataset.download=false"]
    return "run.py", entry_argv("run.py", tmp, f"paths.data_dir={data_dir}", "paths.data_mirror=null",
                                f"paths.cache_dir={tmp / 'cache'}", "tracking=none", *source, *extra)


FILE_CASES = [(name, entry) for name, (_, entries, _) in FILES.items() for entry in entries.split()]


@pytest.mark.parametrize("name,entry", FILE_CASES, ids=[f"{n}-{e}" for n, e in FILE_CASES])
def test_a_bad_conversation_file_is_refused_in_one_line_naming_file_conversation_and_field(
        tmp_path, monkeypatch, data_dir, name, entry):
    content, _, words = FILES[name]
    path = _write(tmp_path, content)
    tool, argv = _argv(entry, path, tmp_path, data_dir)
    outcome = run(tool, argv, tmp_path, monkeypatch)
    assert refused(outcome, str(path), *words) == [], outcome.err[-1500:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # nothing written, nothing sent


@pytest.mark.parametrize("entry", ["face", "chat", "file"])
def test_a_file_that_is_not_there_is_named_without_the_data_fetch_hint(tmp_path, monkeypatch, data_dir, entry):
    path = tmp_path / "typo.json"
    tool, argv = _argv(entry, path, tmp_path, data_dir)
    outcome = run(tool, argv, tmp_path, monkeypatch)
    assert refused(outcome, str(path), "file not found") == [], outcome.err[-1500:]
    assert "fetch" not in outcome.err


@pytest.mark.parametrize("name", ARGS)
def test_a_bad_aspect_list_is_refused_before_anything_is_written(tmp_path, monkeypatch, data_dir, name):
    entry, extra, words = ARGS[name]
    path = _write(tmp_path, [CHAT] if entry != "file" else [ARENA])
    tool, argv = _argv(entry, path, tmp_path, data_dir, extra)
    outcome = run(tool, argv, tmp_path, monkeypatch)
    assert refused(outcome, *words) == [], outcome.err[-1500:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# a setting that cannot work, through `face evaluate --set`: refused before its output directory is claimed
SETTINGS = {
    "llm_removed": (["--set", "~llm"], ["llm: the method calls an LLM and the configuration has none"]),
    "model_empty": (["--set", "llm.model=''"], ["llm.model must be a non-empty string, got ''"]),
    "server_option_misspelled": (["--set", "+llm.server.latncy_s=1"],
                                 ["llm.server.latncy_s: not an option of InProcessServer; its options, closest first: "
                                  "latency_s, "]),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_a_setting_that_cannot_work_is_one_line_before_anything_is_written(tmp_path, monkeypatch, data_dir, name):
    """`--set ~llm` used to end with "unexpected ConfigKeyError" after writing --out's .face-run.json, an unknown
    server option with "unexpected TypeError" after the cost estimate, and an empty model name was accepted."""
    extra, words = SETTINGS[name]
    tool, argv = _argv("face", _write(tmp_path, [CHAT]), tmp_path, data_dir, extra)
    outcome = run(tool, argv, tmp_path, monkeypatch)
    assert refused(outcome, *words) == [], outcome.err[-1500:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_the_case_table_covers_both_entry_points_and_every_format():
    entries = [e for _, e in FILE_CASES] + [ARGS[n][0] for n in ARGS]
    assert len(entries) >= 25 and {"face", "chat", "file"} <= set(entries)


# ---------------------------------------------------------------- face report RUN_DIR
def _run_dir(tmp: Path) -> Path:
    """A finished run directory, written by hand (one conversation, one assistant turn, two particles scored
    under two instructions for relevance): what `face evaluate` writes, minus the report."""
    d = tmp / "run"
    d.mkdir()
    (d / "conversations.json").write_text(json.dumps([{"conv_id": "c1", "system": "crs-a", "dialogue": [
        {"turn_ind": 0, "role": "USER", "utterance": "Any heist movie?"},
        {"turn_ind": 1, "role": "ASST", "utterance": "Try Heat (1995). Do you like older films?"}]}]))
    (d / "particles.jsonl").write_text(json.dumps({"conv_id": "c1", "turn_ind": 1, "assistant_utterance": "Try Heat",
                                                   "particles": [
        {"particle_ind": 0, "dialogue_act": "recommendation", "particle": "Heat (1995)", "user_feedback": "none"},
        {"particle_ind": 1, "dialogue_act": "preference elicitation", "particle": "older films?",
         "user_feedback": "none"}]}) + "\n")
    lines = [{"aspect": "relevance", "conv_id": "c1", "turn_ind": 1, "particle_ind": p, "instruction_id": i,
              "score": s, "samples": [s]} for p in (0, 1) for i, s in (("itr1", 2.0), ("itr2", 1.0 + p))]
    (d / "particle_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (d / "run_file.json").write_text(json.dumps([{"conv_id": "c1", "turns": [
        {"turn_ind": 1, "turn_level_pred": {"relevance": 1.75}}], "dial_level_pred": {}}]))
    return d


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-20])


def _drop_key(key: str):
    def change(p: Path) -> None:
        rows = [json.loads(ln) for ln in p.read_text().splitlines()]
        rows[2].pop(key)
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return change


REPORTS = {  # name -> (file, what is done to it, words)
    "scores_missing": ("particle_scores.jsonl", Path.unlink, ["particle_scores.jsonl", "missing"]),
    "scores_empty": ("particle_scores.jsonl", lambda p: p.write_text(""), ["particle_scores.jsonl", "is empty"]),
    "scores_blank_lines": ("particle_scores.jsonl", lambda p: p.write_text("\n\n"), ["no score records"]),
    "scores_truncated": ("particle_scores.jsonl", _truncate, ["particle_scores.jsonl", "[line 4]", "malformed JSON"]),
    "scores_not_json": ("particle_scores.jsonl", lambda p: p.write_text("aspect,score\nrelevance,1\n"),
                        ["particle_scores.jsonl", "[line 1]", "malformed JSON"]),
    "scores_binary": ("particle_scores.jsonl", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n"),
                      ["particle_scores.jsonl", "[line 1]", "not UTF-8"]),
    "scores_without_score": ("particle_scores.jsonl", _drop_key("score"), ["[line 3]", "missing key 'score'"]),
    "scores_without_particle_ind": ("particle_scores.jsonl", _drop_key("particle_ind"),
                                    ["[line 3]", "missing key 'particle_ind'"]),
    "run_file_truncated": ("run_file.json", _truncate, ["run_file.json", "malformed JSON"]),
    "run_file_missing": ("run_file.json", Path.unlink, ["run_file.json", "missing"]),
    "conversations_empty_list": ("conversations.json", lambda p: p.write_text("[]"),
                                 ["conversations.json", "no conversations"]),
    "conversations_system_object": ("conversations.json",
                                    lambda p: p.write_text(p.read_text().replace('"crs-a"', '{"a": 1}')),
                                    ["conversations.json", "conversation 'c1'", "system name"]),
    "particles_truncated": ("particles.jsonl", _truncate, ["particles.jsonl", "[line 1]", "malformed JSON"]),
}


@pytest.mark.parametrize("name", REPORTS)
def test_face_report_on_a_broken_run_directory_names_the_file_and_line(tmp_path, monkeypatch, name):
    file, change, words = REPORTS[name]
    d = _run_dir(tmp_path)
    change(d / file)
    outcome = run("face", ["report", str(d)], tmp_path, monkeypatch)
    assert refused(outcome, "cannot rebuild the report", *words) == [], outcome.err[-1500:]
    assert not (d / "report.html").exists()


def test_face_report_on_a_directory_that_is_not_there(tmp_path, monkeypatch):
    outcome = run("face", ["report", str(tmp_path / "nowhere")], tmp_path, monkeypatch)
    assert refused(outcome, "nowhere", "not a directory") == []


def test_the_hand_written_run_directory_gives_a_report(tmp_path, monkeypatch):
    """The control for the cases above: unbroken, the same directory is reported on, both particles shown."""
    d = _run_dir(tmp_path)
    outcome = run("face", ["report", str(d)], tmp_path, monkeypatch)
    assert outcome.code == 0, outcome.err
    html = (d / "report.html").read_text()
    assert 'id="c1"' in html and "Heat (1995)" in html and "older films?" in html


# ---------------------------------------------------------------- valid files that used to be refused or renamed
def test_a_byte_order_mark_is_accepted_in_json_jsonl_and_crsarena_format(tmp_path):
    bom = b"\xef\xbb\xbf"
    (tmp_path / "a.jsonl").write_bytes(bom + json.dumps(CHAT).encode() + b"\n")
    (tmp_path / "b.json").write_bytes(bom + json.dumps([CHAT]).encode())
    (tmp_path / "c.json").write_bytes(bom + json.dumps([ARENA]).encode())
    for name in ("a.jsonl", "b.json"):
        [c] = load_logs(tmp_path / name)
        assert c.conv_id == "c1" and [t.utterance for t in c.turns] == [m["content"] for m in CHAT["messages"]]
    [c] = load_conversations(tmp_path / "c.json", require_labels=False, allow_empty_utterances=False)
    assert c.conv_id == "mycrs_x" and c.turns[1].utterance == "Try Heat (1995)."


def test_openai_multipart_text_is_joined_with_a_newline(tmp_path):
    parts = [{"type": "text", "text": "Try Heat (1995)."}, {"type": "text", "text": "Or Ronin?"}]
    p = _write(tmp_path, _with(CHAT, ["messages", 1, "content"], parts))
    [c] = load_logs(p)
    assert c.turns[1].utterance == "Try Heat (1995).\nOr Ronin?"
    assert c.turns[3].utterance == "Then Ronin (1998)."


def test_an_escaped_surrogate_pair_is_valid_text_not_a_lone_surrogate(tmp_path):
    p = tmp_path / "logs.json"
    p.write_text(json.dumps([CHAT]).replace("Try Heat (1995).", "Try Heat \\ud83c\\udfac"), encoding="utf-8")
    assert "\\ud83c\\udfac" in p.read_text()  # the file holds the escapes, not the character
    [c] = load_logs(p)
    assert c.turns[1].utterance == "Try Heat \U0001F3AC"  # one character: the clapper board


def test_integer_ids_and_system_names_are_kept_as_their_digits_never_renamed(tmp_path):
    convs = [*_with(CHAT, ["id"], 0, ["system"], 7), *_with(CHAT, ["id"], 12345678901234567890123),
             *_with(CHAT, ["id"], None, ["system"], None), *_with(ARENA, ["conv_id"], -5, ["system"], 0)]
    [a, b, c, d] = load_logs(_write(tmp_path, convs))
    assert (a.conv_id, a.system) == ("0", "7")
    assert b.conv_id == "12345678901234567890123"
    assert (c.conv_id, c.system) == ("conv3", "unknown")  # null is "not given": the position (from 1) names it
    assert (d.conv_id, d.system) == ("-5", "0")


def test_the_released_crsarena_eval_still_loads_with_its_empty_turns(data_dir):
    """The released file has 9 empty ASST utterances (labelled 0): read as published; the same strictness that
    refuses them in a user's file would refuse the paper's data."""
    from face.data import CRSARENA_EVAL

    convs = load_conversations(data_dir / CRSARENA_EVAL)
    raw = json.loads((data_dir / CRSARENA_EVAL).read_text(encoding="utf-8"))
    assert len(convs) == len(raw) == 467
    assert sum(not t.utterance.strip() for c in convs for t in c.turns) == sum(
        not t["utterance"].strip() for c in raw for t in c["dialogue"]) == 9


def test_face_evaluate_keeps_integer_ids_and_multipart_text_through_the_run_file_and_the_report(
        tmp_path, monkeypatch, data_dir):
    """A file as a chat tool exports it: a byte-order mark, integer ids and system names, multi-part content."""
    parts = [{"type": "text", "text": "Try Heat (1995)."}, {"type": "text", "text": "Or Ronin?"}]
    convs = [*_with(CHAT, ["id"], 0, ["system"], 7, ["messages", 1, "content"], parts), *_with(CHAT, ["id"], 42)]
    logs = tmp_path / "logs.jsonl"
    logs.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(c) + "\n" for c in convs).encode())
    outcome = run("face", ["evaluate", str(logs), "--aspects", "relevance", "--llm", "fake", "--out",
                           str(tmp_path / "out"), "--yes", "--set", f"paths.data_dir={data_dir}", "--set",
                           f"paths.cache_dir={tmp_path / 'cache'}", "--set", "run_size=tiny"], tmp_path, monkeypatch)
    assert outcome.code == 0, outcome.err[-2000:]
    out = tmp_path / "out"
    assert [r["conv_id"] for r in json.loads((out / "run_file.json").read_text())] == ["0", "42"]
    convs = json.loads((out / "conversations.json").read_text())
    assert [(c["conv_id"], c["system"]) for c in convs] == [("0", "7"), ("42", "crs-a")]
    assert convs[0]["dialogue"][1]["utterance"] == "Try Heat (1995).\nOr Ronin?"
    assert run("face", ["report", str(out)], tmp_path, monkeypatch).code == 0


def test_a_file_with_three_bad_conversations_reports_all_three_counting_positions_from_1(tmp_path):
    """A user fixes every bad conversation in one go (CRSArena-Dial's closed set has six such), not one per run."""
    empty = _with(CHAT, ["id"], "c2", ["messages", 3, "content"], " ")
    twice = _with(CHAT, ["id"], "c4", ["messages", 1, "role"], "user")
    no_id_unknown_role = _with(CHAT, ["id"], None, ["messages", 2, "role"], "bot")
    rows = [_with(CHAT, ["id"], "ok1"), empty, _with(CHAT, ["id"], "ok3"), twice, no_id_unknown_role]
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(json.dumps(c[0]) for c in rows) + "\n")
    with pytest.raises(DataError) as e:
        load_logs(path)
    assert str(e.value).splitlines() == [
        f"{path}: 3 conversations are malformed (fix them all, then rerun):",
        "  [line 2 (c2), message 4] empty message",
        "  [line 4 (c4), message 2] two consecutive user messages (merge them, or insert the missing turn)",
        "  [line 5 (conv5), message 3] unknown role 'bot' (expected user, assistant or system)"]


def test_a_line_that_is_not_json_hides_no_other_bad_conversation_of_the_file(tmp_path):
    """A JSON syntax error on one line used to be the only problem reported: every bad line is, in file order."""
    rows = [json.dumps(CHAT)[:-2], json.dumps(_with(CHAT, ["id"], "c2", ["messages", 3, "content"], " ")[0]),
            json.dumps(CHAT), "{oops", json.dumps(_with(CHAT, ["id"], "c5", ["messages", 2, "role"], "bot")[0])]
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError) as e:
        load_logs(path)
    assert str(e.value).splitlines() == [
        f"{path}: 4 conversations are malformed (fix them all, then rerun):",
        "  [line 1] neither JSON nor JSON Lines: Expecting ',' delimiter",
        "  [line 2 (c2), message 4] empty message",
        "  [line 4] neither JSON nor JSON Lines: Expecting property name enclosed in double quotes",
        "  [line 5 (c5), message 3] unknown role 'bot' (expected user, assistant or system)"]


def test_more_bad_conversations_than_the_cap_are_counted_not_listed(tmp_path, monkeypatch):
    from face.data import io

    monkeypatch.setattr(io, "MAX_REPORTED", 2)
    convs = [_with(CHAT, ["id"], f"c{i}", ["messages", 1, "content"], "")[0] for i in range(5)]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(convs))
    with pytest.raises(DataError) as e:
        load_logs(path)
    lines = str(e.value).splitlines()
    assert lines[0].endswith("5 conversations are malformed (fix them all, then rerun):")
    assert lines[1:] == ["  [conversation 1 (c0), message 2] empty message",
                         "  [conversation 2 (c1), message 2] empty message", "  … and 3 more"]


def test_three_bad_conversations_in_crsarena_evals_format_are_all_reported(tmp_path):
    convs = [_with(ARENA, ["conv_id"], f"crs_{i}", ["dialogue", 1, "utterance"], "" if i % 2 else "fine")[0]
             for i in range(6)]
    path = tmp_path / "arena.json"
    path.write_text(json.dumps(convs))
    with pytest.raises(DataError) as e:
        load_conversations(path, require_labels=False, allow_empty_utterances=False)
    assert str(e.value).splitlines()[1:] == [
        f"  [conversation 'crs_{i}', turn 2 (turn_ind 1)] empty utterance" for i in (1, 3, 5)]
