"""face.compare and Comparison.write as careful as face.evaluate (issue 41, items 6 and 7): arguments of the wrong type
refused, a comparison's directory claimed as a run's is, names written as text in every format they reach (CSV,
Markdown, LaTeX, mathtext, MLflow keys), scores outside their scale refused, a difference that cannot be sized said
to be so. The command line's refusals, Ctrl-C and MLflow: tests/test_reliability_compare.py."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_compare import _run_dir, _scores

from face.errors import ConfigError, DataError


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def two(tmp_path) -> tuple[Path, Path]:
    """Two run directories, 10 conversations each, relevance and dialogue_overall on their scales."""
    rng = np.random.default_rng(11)
    turns = {f"c{i}": [1.0, 2.0] for i in range(10)}
    return (_run_dir(tmp_path, "a", _scores(rng, 10, 0), turns),
            _run_dir(tmp_path, "b", _scores(rng, 10, 0.5), turns))


# ---------------------------------------------------------------- arguments of the wrong type

@pytest.mark.parametrize("kwargs,said", [
    ({"allow_incomparable": "false"}, "allow_incomparable must be True or False, got 'false'"),
    ({"by_system": "yes"}, "by_system must be True or False, got 'yes'"),
    ({"names": "ab"}, "names must be a list of names, e.g. ['v1', 'v2'], got 'ab'"),
    ({"names": ["a", 2]}, "names must be a list of names"),
    ({"aspects": "relevance"}, "aspects must be a list of names"),
    ({"tracking_uri": 5}, "tracking_uri must be a string or None, got 5"),
    ({"seed": -1}, "seed must be an integer >= 0, got -1"),
    ({"names": ["v1", " "]}, "an empty name"),
])
def test_compare_refuses_an_argument_of_the_wrong_type_or_value_with_a_config_error(tmp_path, kwargs, said):
    """b scores one aspect less than a: a string "false" taken for True would compare them (with a warning)."""
    import face

    a = _run_dir(tmp_path, "a", {"c0": 1.0, "c1": 2.0}, {"c0": [1.0], "c1": [2.0]})
    b = _run_dir(tmp_path, "b", {"c0": 2.0, "c1": 3.0})
    with pytest.raises(ConfigError) as e:
        face.compare(a, b, **kwargs)
    assert said in str(e.value)


@pytest.mark.parametrize("other", [5, None, 1.5])
def test_a_run_that_is_no_path_id_or_result_is_a_config_error(two, other):
    import face

    with pytest.raises(ConfigError, match=f"a run must be a path, an MLflow run id or a face.Result, got {other}"):
        face.compare(two[0], other)


def test_a_system_name_that_looks_like_a_key_is_refused_without_being_shown(two):
    import face

    key = "sk-proj-" + "aB3" * 10
    with pytest.raises(ConfigError) as e:
        face.compare(*two, names=[key, "v2"])
    assert "looks like a credential" in str(e.value) and key not in str(e.value) and "aB3aB3" not in str(e.value)


# ---------------------------------------------------------------- the directory a comparison writes

def test_write_never_goes_into_another_run_a_compared_run_the_results_or_proc(tmp_path, two, monkeypatch):
    """Refused before anything is drawn or written: another run's directory (its marker, or results without one)
    unless overwrite, a compared run's directory even with overwrite, the project's results/, /proc, a non-path."""
    import face

    monkeypatch.setenv("FACE_PROJECT_ROOT", str(tmp_path / "project"))
    victim = _run_dir(tmp_path, "victim", {"c0": 1.0})
    (victim / "report.html").write_text("the victim's report")
    (tmp_path / "project" / "results" / "reproduce_table2").mkdir(parents=True)
    comp = face.compare(*two, n_boot=200)
    before = _files(tmp_path)
    refusals = [((victim,), "out_dir: .*victim holds another run's results.*pass overwrite=True to replace them"),
                ((two[1], True), r"out_dir: .*b is the input directory itself"),
                ((tmp_path / "project" / "results" / "reproduce_table2",), "inside the project's results directory"),
                ((tmp_path / "project" / "results" / "new",), "inside the project's results directory"),
                (("/proc/x",), "out_dir: /proc/x is under /proc, a kernel pseudo-filesystem"),
                ((5,), "out_dir must be a path"), ((tmp_path / "c", "yes"), "overwrite must be True or False")]
    for args, said in refusals:
        with pytest.raises(ConfigError, match=said):
            comp.write(*args)
    with pytest.raises(ConfigError, match="report: /proc is under /proc, a kernel pseudo-filesystem"):
        comp.report("/proc/x.html")
    assert _files(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "project", "victim"]
    assert not (tmp_path / "project" / "results" / "new").exists()


def test_a_comparison_rewrites_its_own_directory_and_another_needs_overwrite(tmp_path, two, monkeypatch):
    import face
    import face.comparison.report as report

    monkeypatch.setattr(report, "figure_data", lambda comp, note="": {"means": b"", "differences": b""})
    out = tmp_path / "cmp"
    comp = face.compare(*two, n_boot=200)
    first = comp.write(out)
    assert (out / ".face-run.json").exists() and {p.name for p in first} >= {"verdicts.csv", "report.html"}
    comp.write(out)  # the same comparison again: its own files replaced
    renamed = face.compare(*two, names=["v1", "v2"], n_boot=200)
    with pytest.raises(ConfigError, match="cmp holds another run's results"):
        renamed.write(out)
    assert pd.read_csv(out / "means.csv")["system"].tolist()[:2] == ["a", "b"]
    renamed.write(out, overwrite=True)
    assert pd.read_csv(out / "means.csv")["system"].tolist()[:2] == ["v1", "v2"]


# ---------------------------------------------------------------- names as text in every format

def test_a_name_reaches_every_table_format_as_text_never_as_markup_or_a_formula(tmp_path):
    from face.report.tables import write_table

    names = ['=HYPERLINK("http://x")', "a|b\nc", "$x$ #1 ~2 ^3 {4} 5% 6_ 7& 8\\", "-1+cmd", "@sum", "+1", "plain"]
    df = pd.DataFrame({"system": names, "mean": [1.5, -2.25, 3.125, 0.5, 0.25, 0.75, 1.0]})
    md, csv_path, tex = write_table(df, tmp_path, "t", "A caption with $5 & #3")
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert [r[0] for r in rows[1:]] == ["'=HYPERLINK(\"http://x\")", "a|b\nc", "$x$ #1 ~2 ^3 {4} 5% 6_ 7& 8\\",
                                        "'-1+cmd", "'@sum", "'+1", "plain"]
    assert [r[1] for r in rows[1:]] == ["1.5", "-2.25", "3.125", "0.5", "0.25", "0.75", "1"]  # numbers as numbers
    lines = md.read_text().splitlines()
    assert lines[4:7] == ['| =HYPERLINK("http://x") | 1.500 |', "| a\\|b c | -2.250 |",
                          "| $x$ #1 ~2 ^3 {4} 5% 6_ 7& 8\\ | 3.125 |"]
    body = tex.read_text()
    assert ("\\$x\\$ \\#1 \\textasciitilde{}2 \\textasciicircum{}3 \\{4\\} 5\\% 6\\_ 7\\& 8\\textbackslash{} & 3.125 "
            "\\\\") in body
    assert "a|b c & -2.250 \\\\" in body and "\\caption{A caption with \\$5 \\& \\#3}" in body


def test_a_dollar_in_a_system_name_is_drawn_as_written_not_parsed_as_mathtext(tmp_path, two, monkeypatch):
    """'a$}{$b' is no valid mathtext: parsed as such, it stopped `face compare` after the tables (no figures, no
    report)."""
    import face
    import face.comparison.figures as cf

    drawn = []
    png = cf.png
    monkeypatch.setattr(cf, "png", lambda fig, note="": drawn.append(fig) or png(fig, note))
    comp = face.compare(*two, names=["a$}{$b", "c$"], n_boot=200)
    assert "a$}{$b" in comp.report(tmp_path / "comparison.html").read_text()
    means_fig, diff_fig = drawn
    assert sorted(t.get_text() for t in means_fig.axes[0].get_yticklabels()) == ["a$}{$b", "c$"]
    assert {t.get_text() for t in diff_fig.axes[0].get_yticklabels()} == {"relevance: c$ − a$}{$b",
                                                                          "dialogue_overall: c$ − a$}{$b"}


def test_names_that_mlflow_would_merge_or_cannot_take_are_refused_before_anything_is_logged(tmp_path):
    import face
    from face.comparison.mlflow_io import comparison_metrics

    rng = np.random.default_rng(12)
    runs = [_run_dir(tmp_path, f"r{i}", _scores(rng, 8, i / 4), {f"c{j}": [1.0] for j in range(8)}) for i in range(3)]
    merged = face.compare(*runs, names=["v 1", "v_1", "v-1"], n_boot=200)
    with pytest.raises(ConfigError, match="'v 1' and 'v_1' would be logged to MLflow under the same metric names"):
        comparison_metrics(merged)
    too_long = face.compare(*runs[:2], names=["x" * 300, "y"], n_boot=200)
    with pytest.raises(ConfigError, match="would be 3[0-9][0-9] characters, MLflow takes 250"):
        comparison_metrics(too_long)
    fine = comparison_metrics(face.compare(*runs, names=["v 1", "v-1", "w/1"], n_boot=200))
    assert len(fine) == 3 * 2 * 4 + 3 * 2  # 3 pairs × 2 aspects × (diff, ci_low, ci_high, p_holm) + 3 × 2 means
    assert {"mean.relevance.v_1", "mean.relevance.v-1", "mean.relevance.w_1"} <= set(fine)


# ---------------------------------------------------------------- scores and sizes

@pytest.mark.parametrize("bad,turns,said", [
    (1e308, None, "the dialogue_overall score 1e+308 is outside its scale 0–4"),
    (-0.5, None, "the dialogue_overall score -0.5 is outside its scale 0–4"),
    (2.0, [2.5], "the relevance score 2.5 is outside its scale 0–2"),
])
def test_a_score_outside_its_aspects_scale_is_refused_naming_the_run_conversation_and_value(tmp_path, bad, turns,
                                                                                          said):
    import face

    turn = {"c0": [1.0], "c1": [1.0]}
    ok = _run_dir(tmp_path, "ok", {"c0": 1.0, "c1": 2.0}, turn)
    odd = _run_dir(tmp_path, "odd", {"c0": 1.0, "c1": bad}, {**turn, "c1": turns or [1.0]})
    with pytest.raises(DataError) as e:
        face.compare(ok, odd, n_boot=200)
    assert str(e.value) == f"{odd} [conversation c1]: {said}"


def test_one_conversation_per_system_leaves_the_detectable_difference_blank_with_a_warning(tmp_path):
    import face

    comp = face.compare(_run_dir(tmp_path, "a", {"c0": 1.0}), _run_dir(tmp_path, "b", {"c1": 2.0}), n_boot=200,
                        target_diff=0.5)
    d = comp.differences.iloc[0]
    assert np.isnan(d["detectable_diff"]) and np.isnan(d["n_needed"])
    for system in ("a", "b"):
        said = f"WARNING: {system} has 1 conversation(s) scored on dialogue_overall: its differences cannot be sized"
        assert any(w.startswith(said) for w in comp.warnings)
    assert "| – | – | unpaired |" in comp.to_markdown()  # detectable_diff, n_needed: blank, not 0.000
