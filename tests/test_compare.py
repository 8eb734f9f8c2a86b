"""face compare / face.compare: the paired or unpaired choice, refusal of incomparable runs, verdicts, ranking, what
moved, and the command and the API on two scripted `face evaluate` outputs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from face.cli import main
from face.comparison.checks import IncomparableRuns
from face.errors import ConfigError
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions
from face.runfile import write_run_file

SETTINGS = {"label": "FACE live — LLM: judge-x (openai)", "llm": {"model": "judge-x", "backend": "openai",
                                                                  "estimator": "sampling"},
            "instructions": {"relevance": {"i1": "Rate it."}, "dialogue_overall": {"i2": "Rate all."}}}


def _run_dir(tmp: Path, name: str, dial: dict[str, float], turns: dict[str, list[float]] | None = None,
             settings: dict | None = None, systems: dict[str, str] | None = None) -> Path:
    """A run directory: run_file.json (+ run_settings.json, + conversations.json with systems)."""
    d = tmp / name
    d.mkdir()
    trows = [("relevance", c, 2 * i + 1, v) for c, vs in (turns or {}).items() for i, v in enumerate(vs)]
    drows = [("dialogue_overall", c, v) for c, v in dial.items()]
    preds = Predictions(pd.DataFrame(trows, columns=TURN_COLUMNS), pd.DataFrame(drows, columns=DIALOGUE_COLUMNS))
    write_run_file(preds, d / "run_file.json")
    if settings is not False:
        (d / "run_settings.json").write_text(json.dumps(settings or SETTINGS))
    if systems:
        convs = [{"conv_id": c, "system": s, "dialogue": [{"turn_ind": 0, "role": "USER", "utterance": "hi"},
                                                          {"turn_ind": 1, "role": "ASST", "utterance": "hello"}]}
                 for c, s in systems.items()]
        (d / "conversations.json").write_text(json.dumps(convs))
    return d


def _face(*argv: str) -> int | None:
    """``face ARGV`` in this process: its exit code (a stop exits through face.runner.guarded)."""
    try:
        return main(list(argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) or e.code is None else 1


def _scores(rng, n: int, shift: float, prefix: str = "c") -> dict[str, float]:
    return {f"{prefix}{i}": float(np.clip(rng.normal(2 + shift, 0.8), 0, 4)) for i in range(n)}


# ---------------------------------------------------------------- paired or unpaired

def test_runs_sharing_conversation_ids_are_paired_and_disjoint_ones_unpaired(tmp_path):
    import face as fc

    rng = np.random.default_rng(0)
    base = _scores(rng, 30, 0)
    same = _run_dir(tmp_path, "v2", {c: v + 0.3 + rng.normal(0, 0.1) for c, v in base.items()})
    other = _run_dir(tmp_path, "w", {f"x{i}": v + 0.3 for i, v in enumerate(base.values())})
    v1 = _run_dir(tmp_path, "v1", base)
    paired = fc.compare(v1, same, n_boot=2000).differences.iloc[0]
    unpaired = fc.compare(v1, other, n_boot=2000).differences.iloc[0]
    assert (paired["pairing"], paired["n_shared"]) == ("paired", 30)
    assert (unpaired["pairing"], unpaired["n_shared"]) == ("unpaired", 0)
    # pairing removes what the conversations share: a far narrower interval for the same shift
    assert paired["ci_high"] - paired["ci_low"] < 0.5 * (unpaired["ci_high"] - unpaired["ci_low"])
    forced = fc.compare(v1, same, n_boot=2000, pairing="unpaired").differences.iloc[0]
    assert forced["pairing"] == "unpaired"
    with pytest.raises(ConfigError, match="pairing=paired: v1 and w share 0 conversation id"):
        fc.compare(v1, other, pairing="paired")


def test_a_small_overlap_is_not_paired(tmp_path):
    import face as fc

    rng = np.random.default_rng(1)
    a = _run_dir(tmp_path, "a", _scores(rng, 20, 0))
    b = _run_dir(tmp_path, "b", {**_scores(rng, 5, 0), **_scores(rng, 15, 0, "z")})  # 5 of 20 shared
    row = fc.compare(a, b, n_boot=500).differences.iloc[0]
    assert (row["pairing"], row["n_shared"]) == ("unpaired", 5)


# ---------------------------------------------------------------- verdicts, ranking, target

def test_verdicts_better_worse_and_no_detectable_difference_never_equal(tmp_path):
    import face as fc

    rng = np.random.default_rng(2)
    a = _scores(rng, 40, 0)
    runs = [_run_dir(tmp_path, "a", a), _run_dir(tmp_path, "up", {c: 0.8 * v + 0.8 for c, v in a.items()}),
            _run_dir(tmp_path, "same", {c: float(np.clip(v + rng.normal(0, 0.01), 0, 4)) for c, v in a.items()})]
    comp = fc.compare(*runs, n_boot=4000, target_diff=0.05)
    v = comp.differences.set_index(["baseline", "candidate"])["verdict"]
    assert v[("a", "up")] == "better" and v[("up", "same")] == "worse"
    assert v[("a", "same")] == "no detectable difference"
    assert set(comp.differences["verdict"]) <= {"better", "worse", "no detectable difference"}
    assert (comp.differences["n_needed"] >= 2).all()  # sized for the verdict: tests/test_compare_power.py
    rank = comp.ranking[comp.ranking["aspect"] == "dialogue_overall"].set_index("system")
    assert rank.loc["up", ["rank", "rank_low", "rank_high"]].tolist() == [1, 1, 1]
    beats = comp.beats.set_index(["system", "opponent"])["p_beats"]
    assert beats[("up", "a")] > 0.99 and beats[("up", "a")] + beats[("a", "up")] == pytest.approx(1)


def test_holm_runs_over_aspects_times_pairs(tmp_path):
    import face as fc

    rng = np.random.default_rng(3)
    a, b = _scores(rng, 25, 0), _scores(rng, 25, 0.2)
    ta = {c: list(np.clip(rng.normal(1, 0.4, 3), 0, 2)) for c in a}  # relevance: a 0-2 scale
    tb = {c: list(np.clip(rng.normal(1.1, 0.4, 3), 0, 2)) for c in a}
    comp = fc.compare(_run_dir(tmp_path, "a", a, ta), _run_dir(tmp_path, "b", b, tb), n_boot=2000)
    d = comp.differences
    assert len(d) == 2 and set(d["aspect"]) == {"relevance", "dialogue_overall"}
    lo, hi = sorted(d["p_value"])
    assert sorted(d["p_holm"]) == pytest.approx(sorted([min(1, 2 * lo), min(1, max(2 * lo, hi))]))


def test_the_figures_show_each_mean_difference_and_p_beats_of_the_tables_with_its_verdicts_colour(tmp_path,
                                                                                                    monkeypatch):
    import matplotlib.colors as mcolors

    import face as fc
    import face.comparison.figures as cf

    drawn_figures = []
    png = cf.png
    monkeypatch.setattr(cf, "png", lambda fig, note="": drawn_figures.append(fig) or png(fig, note))
    rng = np.random.default_rng(2)
    a = _scores(rng, 40, 0)
    ta = {c: list(np.clip(rng.normal(0.7, 0.3, 3), 0, 1.2)) for c in a}  # relevance: a 0-2 scale
    up = {c: [x + 0.8 for x in v] for c, v in ta.items()}
    runs = [_run_dir(tmp_path, "a", a, ta), _run_dir(tmp_path, "up", {c: 0.8 * v + 0.8 for c, v in a.items()}, up),
            _run_dir(tmp_path, "same", {c: float(np.clip(v + rng.normal(0, 0.01), 0, 4)) for c, v in a.items()},
                     ta)]
    comp = fc.compare(*runs, n_boot=2000)
    comp.report(tmp_path / "comparison.html")
    means_fig, diff_fig, *beats_figs = drawn_figures

    def shown(ax) -> dict[str, tuple[float, float, float, str]]:
        """{y tick label: (point, whisker low, whisker high, colour)} of an axes' error bars."""
        ticks = {round(y): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
        out = {}
        for c in ax.containers:
            points, segments = c.lines[0].get_xydata(), c.lines[2][0].get_segments()
            for (x, y), seg in zip(points, segments):
                out[ticks[round(y)]] = (x, seg[0][0], seg[1][0], mcolors.to_hex(c.lines[0].get_color()))
        return out

    assert len(means_fig.axes) == len(comp.scales) == 2
    for ax, (aspect, scale) in zip(means_fig.axes, comp.scales.items()):
        assert ax.get_title(loc="left").startswith(aspect) and ax.get_xlim() == tuple(scale)
        want = comp.means[comp.means["aspect"] == aspect]
        assert shown(ax) == {r.system: pytest.approx((r.mean, r.ci_low, r.ci_high, "#2166ac"))
                             for r in want.itertuples()}
    d = comp.differences
    assert set(d["verdict"]) == {"better", "worse", "no detectable difference"}  # every colour is drawn
    assert shown(diff_fig.axes[0]) == {
        f"{r.aspect}: {r.candidate} − {r.baseline}": pytest.approx((r.diff, r.ci_low, r.ci_high,
                                                                    cf.VERDICT_COLOURS[r.verdict]))
        for r in d.itertuples()}
    assert len(beats_figs) == len(comp.aspects)  # three systems: a P(beats) matrix per aspect
    for fig, aspect in zip(beats_figs, comp.aspects):
        ax = fig.axes[0]
        rows = [t.get_text() for t in ax.get_yticklabels()]
        cols = [t.get_text() for t in ax.get_xticklabels()]
        cells = {(rows[int(t.get_position()[1])], cols[int(t.get_position()[0])]): float(t.get_text())
                 for t in ax.texts}
        want = comp.beats[comp.beats["aspect"] == aspect]
        assert cells == {(r.system, r.opponent): pytest.approx(r.p_beats, abs=0.005) for r in want.itertuples()
                         if r.system != r.opponent}


# ---------------------------------------------------------------- refusing what is not comparable

@pytest.mark.parametrize("change,expected", [
    ({"llm": {"model": "judge-y", "backend": "openai", "estimator": "sampling"}}, "different judge LLMs: a judge-x"),
    ({"llm": {"model": "judge-x", "backend": "openai", "estimator": "logprobs"}}, "different estimators"),
    ({"instructions": {"relevance": {"i1": "Rate it."}, "dialogue_overall": {"i2": "Rate everything."}}},
     "different instruction sets for dialogue_overall"),
    ({"aspects": [{"name": "dialogue_overall", "level": "dialogue", "scale": [1, 2, 3, 4, 5]}]},
     "different scales for dialogue_overall: a (0, 1, 2, 3, 4), b (1, 2, 3, 4, 5)"),
])
def test_incomparable_runs_are_refused_in_one_line_unless_allowed(tmp_path, capsys, change, expected):
    import face as fc

    rng = np.random.default_rng(4)
    a = _run_dir(tmp_path, "a", _scores(rng, 10, 0))
    b_scores = {c: 1 + 0.75 * v for c, v in _scores(rng, 10, 0).items()}  # on both scales, 0-4 and 1-5
    b = _run_dir(tmp_path, "b", b_scores, settings={**SETTINGS, **change})
    with pytest.raises(IncomparableRuns, match=re.escape(expected)):
        fc.compare(a, b)
    assert _face("compare", str(a), str(b), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: not comparable: ") and expected in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    comp = fc.compare(a, b, allow_incomparable=True, n_boot=500)
    assert comp.warnings and expected in comp.warnings[0] and comp.to_markdown().startswith("> WARNING")


def test_the_override_is_warned_on_every_table_the_report_and_the_console(tmp_path, capsys):
    rng = np.random.default_rng(4)
    a = _run_dir(tmp_path, "a", _scores(rng, 10, 0))
    b = _run_dir(tmp_path, "b", _scores(rng, 10, 0), settings={**SETTINGS, "llm": {"model": "judge-y"}})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out"), "--allow-incomparable",
                 "--n-boot", "500"]) == 0
    printed = capsys.readouterr().out
    warning = "WARNING: compared although not comparable (allow_incomparable=True / --allow-incomparable): " \
              "different judge LLMs: a judge-x (openai), b judge-y (?)"
    assert printed.count(warning) == 2  # above and below the table
    written = [p for p in (tmp_path / "out").iterdir() if p.suffix in (".md", ".tex", ".html")]
    assert len(written) >= 13
    for p in written:
        assert warning.replace("(?)", "(?)") in p.read_text().replace("\\_", "_"), p.name


def test_different_aspects_are_refused_and_a_bare_run_file_is_compared_with_a_note(tmp_path):
    import face as fc

    rng = np.random.default_rng(5)
    a = _run_dir(tmp_path, "a", _scores(rng, 10, 0), {f"c{i}": [1.0] for i in range(10)})
    b = _run_dir(tmp_path, "b", _scores(rng, 10, 0))
    with pytest.raises(IncomparableRuns, match="different aspects: a scores dialogue_overall, relevance; b scores "
                                               "dialogue_overall"):
        fc.compare(a, b)
    assert fc.compare(a, b, aspects=["dialogue_overall"], n_boot=500).aspects == ["dialogue_overall"]
    bare = fc.compare(a / "run_file.json", b / "run_file.json", aspects=["dialogue_overall"], n_boot=500)
    assert any("does not record its judge LLM" in w for w in bare.warnings)


def test_by_system_splits_one_run_into_its_systems(tmp_path):
    import face as fc

    rng = np.random.default_rng(6)
    scores = {**_scores(rng, 12, 0, "a"), **_scores(rng, 12, 1, "b"), **_scores(rng, 12, 0.5, "c")}
    d = _run_dir(tmp_path, "all", scores, systems={c: f"crs-{c[0]}" for c in scores})
    comp = fc.compare(d, by_system=True, n_boot=1000)
    assert list(comp.systems["system"]) == ["crs-a", "crs-b", "crs-c"] and len(comp.differences) == 3
    with pytest.raises(ConfigError, match="at least two systems, got 1"):
        fc.compare(d)


# ---------------------------------------------------------------- the command and the API on scripted runs

LOG_USERS = ["Any good heist movies?", "Something funny please", "A scary film?", "Something for kids?"]


def _logs(path: Path, good: bool) -> Path:
    lines = []
    for i in range(8):
        reply = f"Try Heat ({1990 + i}). Do you like older films?" if good else "I do not know. Maybe a movie."
        lines.append(json.dumps({"id": f"c{i}", "system": "v2" if good else "v1", "messages": [
            {"role": "user", "content": LOG_USERS[i % 4]}, {"role": "assistant", "content": reply},
            {"role": "user", "content": "Thanks!" if good else "Not helpful."}]}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def scripted_runs(tmp_path_factory) -> dict[str, Path]:
    """Two `face evaluate --llm scripted` outputs of the same 8 conversation ids (v1, v2), their logs and cache."""
    tmp = tmp_path_factory.mktemp("compare_runs")
    for name, good in (("v1", False), ("v2", True)):
        assert main(["evaluate", str(_logs(tmp / f"{name}.jsonl", good)), "--llm", "fake", "--aspects",
                     "relevance,dialogue_overall", "--out", str(tmp / name), "--yes", "--set",
                     f"paths.cache_dir={tmp / 'cache'}", "--set", "run_size=tiny"]) == 0
    return {"v1": tmp / "v1", "v2": tmp / "v2", "tmp": tmp}


@pytest.mark.slow
def test_face_compare_prints_the_verdicts_and_writes_the_report(scripted_runs, tmp_path, capsys):
    v1, v2 = scripted_runs["v1"], scripted_runs["v2"]
    capsys.readouterr()
    out = tmp_path / "cmp"
    assert main(["compare", str(v1), str(v2), "--out", str(out), "--target-diff", "0.3", "--n-boot", "2000"]) == 0
    printed = capsys.readouterr().out
    assert "Scored by: FACE live — LLM: scripted-model (scripted)" in printed
    assert "| aspect | baseline | candidate |" in printed
    for aspect in ("relevance", "dialogue_overall"):
        assert f"{aspect}: v2 vs v1:" in printed
    table = pd.read_csv(out / "verdicts.csv")
    assert set(table["verdict"]) <= {"better", "worse", "no detectable difference"} and len(table) == 2
    assert (table["pairing"] == "paired").all() and table["n_needed"].notna().all()
    html = (out / "report.html").read_text()
    assert html.count('class="llm"') == 1 and "scripted-model (scripted)" in html
    links = [p.split('"')[0] for p in html.split('href="')[1:]]
    assert links and all("report.html#c" in link for link in links)
    file, anchor = links[0].split("#")
    target = (out / file).resolve()
    assert target in ((v1 / "report.html").resolve(), (v2 / "report.html").resolve())
    assert f'id="{anchor}"' in target.read_text()  # the conversation's anchor in that run's diagnostics report


@pytest.mark.slow
def test_face_compare_api_takes_results_or_paths_and_gives_the_same_numbers(scripted_runs, tmp_path):
    import face

    tmp = scripted_runs["tmp"]
    by_path = face.compare(str(scripted_runs["v1"]), str(scripted_runs["v2"]), n_boot=2000)
    results = [face.evaluate(str(tmp / f"{v}.jsonl"), aspects=["relevance", "dialogue_overall"], llm="fake",
                             run_size="tiny", quiet=True, **{"paths.cache_dir": str(tmp / "cache")})
               for v in ("v1", "v2")]
    by_result = face.compare(*results, names=["v1", "v2"], n_boot=2000)
    assert isinstance(by_result, face.Comparison) and callable(face.compare)
    cols = ["aspect", "baseline", "candidate", "pairing", "diff", "ci_low", "ci_high", "p_value", "verdict"]
    pd.testing.assert_frame_equal(by_result.differences[cols], by_path.differences[cols])
    assert "| relevance | v1 | v2 |" in by_path.to_markdown()
    assert by_result.report(tmp_path / "r.html").read_text().count('class="llm"') == 1


def test_face_compare_is_the_function_whichever_import_came_first():
    import subprocess
    import sys

    code = ("import face.comparison.cli, face; print(callable(face.compare), face.compare.__module__);"
            "import face.comparison.engine as e; print(face.compare is e.compare)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["True", "face.comparison.engine", "True"]


@pytest.mark.slow
def test_mlflow_runs_are_read_by_id_and_the_comparison_is_recorded(tmp_path, mlflow_store, capsys):
    import mlflow

    shutil.copyfile(mlflow_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(7)
    base = _scores(rng, 12, 0)
    a = _run_dir(tmp_path, "a", base)
    b = _run_dir(tmp_path, "b", {c: v + 0.5 for c, v in base.items()})
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("crsarena_main")
    with mlflow.start_run(run_name="tracked v2") as tracked:
        mlflow.log_artifact(str(b / "run_file.json"), "run")
        mlflow.log_artifact(str(b / "run_settings.json"), "run")
    assert main(["compare", str(a), f"mlflow:{tracked.info.run_id}", "--out", str(tmp_path / "out"), "--mlflow",
                 "--tracking-uri", uri, "--n-boot", "500"]) == 0
    printed = capsys.readouterr().out
    assert "dialogue_overall: tracked v2 vs a:" in printed
    run_id = printed.split("MLflow run: ")[1].split()[0]
    run = mlflow.MlflowClient(uri).get_run(run_id)
    assert run.data.tags["compared_run.1"] == tracked.info.run_id
    assert run.data.metrics["diff.dialogue_overall.tracked_v2_vs_a"] == pytest.approx(0.5)
    assert all(v == round(v, 6) for v in run.data.metrics.values())  # shown without float noise
    # the description MLflow draws legibly: a fixed-width block, one row per verdict with its CI and Holm p
    note = run.data.tags["mlflow.note.content"]
    block = note.split("```text\n")[1].split("```")[0].splitlines()
    assert block[0].split() == ["aspect", "systems", "diff", "95%", "CI", "p", "(Holm)", "verdict"]
    assert block[1].split() == ["dialogue_overall", "tracked", "v2", "vs", "a", "+0.500", "[+0.500,", "+0.500]",
                                "0.002", "better"]  # every score +0.5: the difference and its interval, 1 / 501
    assert "|---" not in note and "Scored by:" in note
    assert "comparison" in {f.path for f in mlflow.MlflowClient(uri).list_artifacts(run_id)}
    assert _face("compare", str(a), "mlflow:" + "0" * 32, "--tracking-uri", uri, "--out", str(tmp_path / "x")) == 2
    assert "error: mlflow:00000000000000000000000000000000: no such MLflow run" in capsys.readouterr().err


def test_too_few_resamples_for_holm_are_warned(tmp_path):
    import face as fc

    rng = np.random.default_rng(8)
    a, b = _scores(rng, 10, 0), _scores(rng, 10, 2)
    comp = fc.compare(_run_dir(tmp_path, "a", a), _run_dir(tmp_path, "b", b), n_boot=200)
    assert comp.differences["p_holm"].min() > 0.004  # 1 / 201
    assert not comp.warnings
    ta = {c: [1.0, 2.0] for c in a}
    many = [_run_dir(tmp_path, f"r{i}", _scores(rng, 10, i), ta) for i in range(4)]  # 6 pairs × 2 aspects = 12 tests
    comp = fc.compare(*many, n_boot=200)
    assert any("n_boot=200 is too few for Holm over 12 tests" in w and "at least 2400" in w for w in comp.warnings)
