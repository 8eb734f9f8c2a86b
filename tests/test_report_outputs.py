"""What a reader sees in tables and in report.html: counts as integers, p-values as ``< 0.001``, one spelling per
split; the report names the LLM once (at the top), ranks the lowest particles on their aspects' scales, colours on
the aspect's fixed scale, shows each instruction's text, numbers turns from 1. Checked against hand-written strings
and the input files' own text."""

from __future__ import annotations

import io
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


def test_report_names_the_scripted_llm_once_at_the_top(scripted_run):
    html = (scripted_run / "report.html").read_text()
    top = re.search(r'<p class="llm" id="llm"><b>Scored by:</b> (.*?)</p>', html).group(1)
    assert "scripted-model (scripted)" in top and "SCRIPTED TEST SERVER" in top and "n=1, T=0.6" in top
    assert html.count("scripted-model (scripted)") == 1  # not under every table


def test_report_shows_each_instructions_text_on_hover(scripted_run, data_dir):
    import html as html_lib

    html = (scripted_run / "report.html").read_text()
    # each particle's score row: <tr data-aspect="aspect">…<abbr class="instr">id</abbr> under every instruction;
    # the texts once, in a JSON map the page's script reads on hover (not repeated in every row: a full run's page
    # would be hundreds of MB)
    rows = re.findall(r'<tr data-aspect="(\w+)"(?: class="lowest")?><td>\1</td>(.*?)</tr>', html, re.S)
    hovers = [(aspect, i) for aspect, row in rows for i in re.findall(r'<abbr class="instr">(\w+)</abbr>', row)]
    assert {a for a, _ in hovers} == {"relevance", "dialogue_overall"}
    texts = json.loads(html_lib.unescape(re.search(r'<script id="instruction-texts" type="application/json">(.*?)'
                                                   r"</script>", html, re.S).group(1)))
    for aspect, i in hovers:  # the released file's own text of that aspect's instruction
        released = json.loads((data_dir / f"face_released/top16_instructions/{aspect}.json").read_text())
        assert texts[aspect][i] == {f"itr{r['iteration']}": r["text"] for r in released}[i]


def test_report_numbers_turns_from_1_with_the_datas_turn_ind_beside(scripted_run):
    html = (scripted_run / "report.html").read_text()
    c2 = html[html.index('id="c2"'):]
    # c2: user (turn_ind 0), assistant (1), user (2), assistant (3)
    assert re.findall(r"Turn (\d+) <span class=\"note\">\(turn_ind (\d+)\)</span> · (\w+)", c2) == [
        ("1", "0", "user"), ("2", "1", "assistant"), ("3", "2", "user"), ("4", "3", "assistant")]


@pytest.fixture(scope="module")
def rebuilt_without_settings(evaluated_chat_logs, tmp_path_factory) -> tuple[str, list]:
    """`face report` on a copy of the session's run without its run_settings.json (built once for the module): the
    page, and (title, colour limits, colour map) of each heatmap the report drew."""
    from matplotlib.figure import Figure

    old = tmp_path_factory.mktemp("report") / "old"
    shutil.copytree(evaluated_chat_logs, old)
    (old / "run_settings.json").unlink()
    (old / "report.html").unlink()
    seen = []
    original = Figure.savefig

    def spy(fig, fname, *args, **kwargs):  # a heatmap the page embeds: saved into memory, not to a file
        if isinstance(fname, io.BytesIO):
            mesh = fig.axes[0].collections[0]
            seen.append((fig.axes[0].get_title().split(" (")[0], mesh.get_clim(), mesh.get_cmap().name))
        return original(fig, fname, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", spy)
        assert main(["report", str(old)]) == 0
    return (old / "report.html").read_text(), seen


def test_report_heatmaps_colour_on_the_aspects_fixed_scale(rebuilt_without_settings):
    # relevance is labelled 0–2 and dialogue_overall 0–4 in CRSArena-Eval (face/datasets/crsarena.py)
    assert rebuilt_without_settings[1] == [("relevance", (0.0, 2.0), "cividis"),
                                           ("dialogue_overall", (0.0, 4.0), "cividis")]


def test_a_run_without_its_settings_file_gets_a_report_saying_the_llm_is_unknown(rebuilt_without_settings):
    html = rebuilt_without_settings[0]
    assert "<b>Scored by:</b> LLM not recorded" in html
    assert "text not recorded" in html


def _hand_made_run():
    """Four conversations of two systems, two assistant turns of two particles each, scored by hand on three
    aspects of different scales: efficiency (0–1) 0.30 + 0.01·i, raw lowest everywhere; dialogue_overall (0–4) 0.8
    for c2's first turn (0.2 of its scale), else 3.0; relevance (0–2) 0.5 for c0's first particle (0.25), else 1.5."""
    from face.data.schema import NO_FEEDBACK, Conversation, Particle, Turn

    convs, particles, rows = [], {}, []
    for c in range(4):
        turns = []
        for k in range(2):
            turns += [Turn(2 * k, "USER", f"user {c}.{k}"), Turn(2 * k + 1, "ASST", f"assistant {c}.{k}")]
            particles[(f"c{c}", 2 * k + 1)] = (Particle("recommendation", f"film {c}.{k}.0", NO_FEEDBACK),
                                               Particle("others", f"chat {c}.{k}.1", "sounds good"))
        convs.append(Conversation(f"c{c}", tuple(turns), system=f"crs-{c % 2}"))
    i = 0
    for c in range(4):
        for ti in (1, 3):
            for pi in (0, 1):
                values = {"efficiency": 0.30 + 0.01 * i,
                          "dialogue_overall": 0.8 if (c, ti) == (2, 1) else 3.0,
                          "relevance": 0.5 if (c, ti, pi) == (0, 1, 0) else 1.5}
                i += 1
                for aspect, v in values.items():
                    for instr, delta in (("itr1", -0.05), ("itr2", 0.05)):  # mean over the two: v
                        rows.append((aspect, f"c{c}", ti, pi, instr, v + delta))
    scores = pd.DataFrame(rows, columns=["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score"])
    return convs, particles, scores


@pytest.fixture(scope="module")
def rendered_lowest(tmp_path_factory) -> str:
    """The report page of ``_hand_made_run`` (rendered once for the module)."""
    from face.pipeline.aggregate import aggregate
    from face.report.diagnostic_report import write_report

    tmp_path = tmp_path_factory.mktemp("lowest")
    convs, particles, scores = _hand_made_run()
    preds = aggregate(scores, {"efficiency": "turn", "relevance": "turn", "dialogue_overall": "dialogue"})
    settings = {"label": "hand-made scores (test)", "llm": {}, "instructions": {}, "aspects": {}}
    html = write_report(tmp_path / "report.html", tmp_path / "tables", "hand", convs, scores, particles, preds,
                        settings).read_text()
    return html


def _table_rows(html: str, table_id: str) -> list[list[str]]:
    import html as html_lib

    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S).group(1)
    return [[html_lib.unescape(re.sub(r"<.*?>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S) if "<td" in row]


def test_the_lowest_particles_are_ranked_on_their_aspects_scales_so_they_come_from_several_aspects(rendered_lowest):
    html = rendered_lowest
    rows = _table_rows(html, "lowest-k")
    assert len(rows) == 10  # the lowest 10 of 48 particle × aspect scores
    # by hand (turn 2 is the first assistant turn): c2's two first-turn particles at 0.8/4 = 0.20, c0's first
    # particle at 0.5/2 = 0.25, then the seven lowest efficiency scores 0.30 … 0.36 (raw scores would put 16
    # efficiency rows first)
    got = [(r[0], r[2], r[4], r[5]) for r in rows]
    assert got[:3] == [("0.20", "dialogue_overall (0–4)", "c2", "2"), ("0.20", "dialogue_overall (0–4)", "c2", "2"),
                       ("0.25", "relevance (0–2)", "c0", "2")]
    assert [r[0] for r in rows[3:]] == [f"{0.30 + 0.01 * i:.2f}" for i in range(7)]
    assert {r[2] for r in rows[3:]} == {"efficiency (0–1)"}
    every = re.search(r'<details id="all-particles"><summary>Show all 48 particle scores, lowest first</summary>',
                      html)
    assert every and html.count("<tr><td class=\"num\">") >= 10 + 48
    # each conversation's "lowest" on the same scale: c0's relevance 0.5 of 0–2, not its efficiency 0.30 of 0–1
    assert re.search(r'id="c0"><summary>c0 · crs-0 ·.*?· lowest: turn 2, recommendation “film 0.0.0”, relevance '
                     r"0.50 of 0–2</summary>", html, re.S)


def test_the_report_names_the_llm_once_shows_one_turn_column_and_no_raw_feedback_token(rendered_lowest):
    html = rendered_lowest
    assert html.count("hand-made scores (test)") == 1  # at the top, not under every table
    header = re.search(r'<table id="lowest-k"><tr>(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r"<th>(.*?)</th>", header) == ["fraction of scale", "score", "aspect (scale)", "system",
                                                     "conversation", "turn", "act", "mention", "user feedback"]
    assert "NO_FEEDBACK_PROVIDED" not in html
    assert html.count("(no feedback)") >= 16 and "sounds good" in html


@pytest.mark.slow  # process-, server- or rendering-bound (≈ 1 s): the fast suite stays within 45 s
def test_hovering_an_instruction_id_in_chromium_shows_its_text(scripted_run, tmp_path, data_dir):
    """The page's script, run by headless Chromium: a mouseover on an instruction id gives it its text as title."""
    import html as html_lib
    import subprocess

    from test_cli import _browser

    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium installed (make setup-browser)")
    page = tmp_path / "hover.html"
    page.write_text((scripted_run / "report.html").read_text().replace("</body>", """<script>
const first = document.querySelector('tr[data-aspect="relevance"] abbr.instr');
first.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
first.setAttribute("data-hovered", "yes");
</script></body>"""))
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<abbr class="instr" title="([^"]*)" data-hovered="yes">(\w+)</abbr>', res.stdout)
    assert m, res.stdout[-2000:]
    released = json.loads((data_dir / "face_released/top16_instructions/relevance.json").read_text())
    assert html_lib.unescape(m.group(1)) == {f"itr{r['iteration']}": r["text"] for r in released}[m.group(2)]
