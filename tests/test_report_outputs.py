"""What a reader sees in tables and in report.html: counts as integers, p-values as ``< 0.001``, one spelling per
split; the report names the LLM (top and every table), colours on the aspect's fixed scale, shows each
instruction's text, numbers turns from 1. Checked against hand-written strings and the input files' own text."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from face.cli import main
from face.report.tables import to_latex, to_markdown, write_table


def test_markdown_prints_counts_as_integers_p_values_below_0_001_and_display_split_names():
    df = pd.DataFrame({"split": ["redial", "opendialkg", "all"], "value": [0.5, 1.0, -0.0204],
                       "p_value": [0.0004, 0.05, np.nan], "n": [128.0, 64.0, 3.0],
                       "pulls": [128.0, 2560.0, np.nan]})
    assert to_markdown(df) == (
        "| split | value | p_value | n | pulls |\n"
        "|---|---|---|---|---|\n"
        "| ReDial | 0.500 | < 0.001 | 128 | 128 |\n"
        "| OpenDialKG | 1.000 | 0.050 | 64 | 2560 |\n"
        "| pooled | -0.020 | – | 3 | – |")


def test_every_p_value_column_of_the_significance_tables_prints_below_0_001():
    df = pd.DataFrame({"p_bootstrap": [0.0, 0.2], "p_williams": [3e-9, 0.0123], "particles_per_turn": [0.0, 2.5]})
    assert to_markdown(df).splitlines()[2:] == ["| < 0.001 | < 0.001 | 0.000 |", "| 0.200 | 0.012 | 2.500 |"]


def test_a_correlation_column_of_whole_numbers_keeps_its_decimals():
    df = pd.DataFrame({"value": [1.0, -1.0, 0.0], "n_missing": [0.0, 2.0, 1.0]})
    assert to_markdown(df).splitlines()[2:] == ["| 1.000 | 0 |", "| -1.000 | 2 |", "| 0.000 | 1 |"]


def test_an_already_displayed_split_name_and_a_p_value_at_4_digits():
    df = pd.DataFrame({"split": ["ReDial"], "p_value": [0.00005]})
    assert to_markdown(df, 4).splitlines()[2] == "| ReDial | < 0.0001 |"


def test_latex_writes_the_same_cells_with_a_math_less_than(tmp_path):
    df = pd.DataFrame({"split": ["opendialkg"], "p_value": [1e-6], "n": [62.0]})
    assert "OpenDialKG & $<$ 0.001 & 62 \\\\" in to_latex(df, "c").splitlines()
    md, csv, _ = write_table(df, tmp_path, "t", "caption")
    assert csv.read_text().splitlines() == ["split,p_value,n", "opendialkg,1e-06,62"]  # the CSV keeps raw values
    assert md.read_text().endswith("| OpenDialKG | < 0.001 | 62 |\n")


@pytest.fixture
def scripted_run(evaluated_chat_logs, tmp_path):
    """A copy of the session's `face evaluate` output (test_cli's chat logs): a test may rebuild its report."""
    shutil.copytree(evaluated_chat_logs, tmp_path / "out")
    return tmp_path / "out"


def test_report_names_the_scripted_llm_at_the_top_and_in_every_table(scripted_run):
    html = (scripted_run / "report.html").read_text()
    top = re.search(r'<p class="llm" id="llm"><b>Scored by:</b> (.*?)</p>', html).group(1)
    assert "scripted-model (scripted)" in top and "SCRIPTED TEST SERVER" in top and "n=1, T=0.6" in top
    tables = re.findall(r"<table>(.*?)</table>", html, re.S)
    assert tables and all(re.match(r"<caption>[^<]*scripted-model \(scripted\)", t) for t in tables)


def test_report_shows_each_instructions_text_on_hover(scripted_run, data_dir):
    import html as html_lib

    html = (scripted_run / "report.html").read_text()
    # each particle's score row: <tr><td>aspect</td>…<abbr title="text">id</abbr> under every instruction
    rows = re.findall(r"<tr(?: class=\"lowest\")?><td>(\w+)</td>(.*?)</tr>", html, re.S)
    hovers = [(aspect, i, t) for aspect, row in rows
              for t, i in re.findall(r'<abbr class="instr" title="(.*?)">(\w+)</abbr>', row, re.S)]
    assert {a for a, _, _ in hovers} == {"relevance", "dialogue_overall"}
    for aspect, i, text in hovers:  # the released file's own text of that aspect's instruction
        released = json.loads((data_dir / f"face_released/top16_instructions/{aspect}.json").read_text())
        assert html_lib.unescape(text) == {f"itr{r['iteration']}": r["text"] for r in released}[i]


def test_report_numbers_turns_from_1_with_the_datas_turn_ind_beside(scripted_run):
    html = (scripted_run / "report.html").read_text()
    c2 = html[html.index('id="c2"'):]
    # c2: user (turn_ind 0), assistant (1), user (2), assistant (3)
    assert re.findall(r"Turn (\d+) <span class=\"note\">\(turn_ind (\d+)\)</span> · (\w+)", c2) == [
        ("1", "0", "user"), ("2", "1", "assistant"), ("3", "2", "user"), ("4", "3", "assistant")]


def test_report_heatmaps_colour_on_the_aspects_fixed_scale(scripted_run, monkeypatch):
    from face.report import diagnostic_report

    seen = []
    original = diagnostic_report._figure_png

    def spy(fig):
        mesh = fig.axes[0].collections[0]
        seen.append((fig.axes[0].get_title().split(":")[0], mesh.get_clim(), mesh.get_cmap().name))
        return original(fig)

    monkeypatch.setattr(diagnostic_report, "_figure_png", spy)
    assert main(["report", str(scripted_run)]) == 0
    # relevance is labelled 0–2 and dialogue_overall 0–4 in CRSArena-Eval (face/datasets/crsarena.py)
    assert seen == [("relevance", (0.0, 2.0), "cividis"), ("dialogue_overall", (0.0, 4.0), "cividis")]


def test_a_run_without_its_settings_file_gets_a_report_saying_the_llm_is_unknown(scripted_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(scripted_run, old)
    (old / "run_settings.json").unlink()
    (old / "report.html").unlink()
    assert main(["report", str(old)]) == 0
    html = (old / "report.html").read_text()
    assert "<b>Scored by:</b> LLM not recorded" in html
    assert "text not recorded" in html
