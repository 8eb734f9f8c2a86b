"""The one reporting stage (face.experiments.result.write): what an experiment returns becomes the run file, the
tables, the figures, the console's tables and the MLflow logs, without a line of writing in the experiment."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from face.experiments.result import ExperimentResult, Table, write
from face.methods import MethodOutput
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions


class Recorder:
    """A tracker that records what it is given."""

    def __init__(self):
        self.metrics, self.artifacts, self.tags = {}, [], {}

    def log_metrics(self, metrics):
        self.metrics.update(metrics)

    def log_artifacts(self, paths, subdir=None):
        self.artifacts += [(subdir, p.name) for p in paths]

    def set_tags(self, tags):
        self.tags.update(tags)


def _output(label="toy", dry_run=False):
    turn = pd.DataFrame([("a", "c1", 1, 0.25), ("a", "c2", 1, 0.75)], columns=TURN_COLUMNS)
    return MethodOutput(Predictions(turn, pd.DataFrame(columns=DIALOGUE_COLUMNS)), label=label,
                        metrics={"llm_requests": 3.0}, dry_run=dry_run)


def test_every_part_of_a_result_is_written_and_logged_once(tmp_path, capsys):
    corr = pd.DataFrame({"level": ["turn", "turn"], "aspect": ["a", "a"], "split": ["all", "x"],
                         "coefficient": ["spearman", "spearman"], "value": [0.5, 0.25], "ci_low": [0.1, 0.0],
                         "ci_high": [0.9, 0.5]})
    frame = pd.DataFrame({"x": [1.0 / 3.0]})
    drawn = []

    def draw(path):
        drawn.append(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"png")
        return path

    result = ExperimentResult("t", tmp_path / "out", tmp_path / "run", output=_output(), outputs={"b": _output("b")},
                              correlations={"": corr, "b.": corr}, metrics={"summary.k": 1.0, "n": 2.0},
                              tables={"t": Table(frame, "A caption.", 2), "raw": Table(frame, float_format="%.12g"),
                                      "timing": Table(frame, "Times.", in_run_dir=True)},
                              figures={"figures/f.png": draw}, texts={"notes.json": "{}"},
                              shown=[("Title", frame, 4), "a line"])
    tracker = Recorder()
    write(result, tracker, "2 conversations")
    out = tmp_path / "out"
    assert (out / "t.md").read_text() == "A caption.\n\n| x |\n|---|\n| 0.33 |\n"
    assert (out / "raw.csv").read_text() == "x\n0.333333333333\n" and not (out / "raw.md").exists()
    assert (tmp_path / "run" / "timing.md").exists() and not (out / "timing.md").exists()
    assert drawn == [out / "figures" / "f.png"] and (out / "notes.json").read_text() == "{}"
    records = json.loads((tmp_path / "run" / "run_file.json").read_text())
    assert [(r["conv_id"], r["turns"][0]["turn_level_pred"]["a"]) for r in records] == [("c1", 0.25), ("c2", 0.75)]
    assert (tmp_path / "run" / "run_file_b.json").exists()
    assert set(result.files) == {"run_file", "run_file_b", "f", "notes"}
    assert tracker.metrics == {"llm_requests": 3.0, "b.llm_requests": 3.0, "summary.k": 1.0, "n": 2.0,
                               "vs_human.turn.a.all.spearman": 0.5, "vs_human.b.turn.a.all.spearman": 0.5,  # pooled
                               "summary.turn_spearman_mean": 0.5, "summary.b.turn_spearman_mean": 0.5}
    assert tracker.tags["mlflow.note.content"].startswith("**toy**\n\n2 conversations")
    assert {("run", "run_file.json"), ("run", "run_file_b.json"), ("results", "t.md"), ("results", "raw.csv"),
            ("results", "timing.tex"), ("results", "f.png"), ("results", "notes.json")} <= set(tracker.artifacts)
    printed = capsys.readouterr().out
    assert "== Title\n| x |\n|---|\n| 0.3333 |" in printed and printed.rstrip().endswith("a line")
    assert "Dry run" not in printed


@pytest.mark.parametrize("banner,said", [(True, "Dry run: nothing was sent. toy\n"), (False, "")])
def test_a_dry_run_writes_no_run_file_and_says_so_unless_told_not_to(tmp_path, capsys, banner, said):
    result = write(ExperimentResult("t", tmp_path / "out", tmp_path / "run", dry_run=True,
                                    output=_output(dry_run=True)), Recorder(), "", banner=banner)
    assert capsys.readouterr().out == said
    assert not (tmp_path / "run").exists() and result.files == {}
