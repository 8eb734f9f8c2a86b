"""The docs stay current with the code: every ``python scripts/run.py ...`` and ``face evaluate ...`` command that
README.md or a page of docs/ shows (in a code block or inline) composes as a valid Hydra config -- an unknown
key, a removed config group or a misspelt experiment fails here -- and every relative link points at a file."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands(text: str) -> list[str]:
    """Shell commands of the page: lines of fenced blocks (continuations joined) and inline code spans."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            found.append(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += re.findall(r"`([^`\n]+)`", prose.replace("\n", " "))
    out = []
    for cmd in found:
        cmd = cmd.strip().removeprefix("$ ")
        m = re.search(r"(python scripts/run\.py|face evaluate)\s.*", cmd)
        if m and not re.search(r"…|\.\.\.|<|\[-|=NAME\b|/path/to/|--set$", cmd):  # placeholders, usage lines
            out.append(m.group(0))
    return out


def _defined_by(text: str) -> set[str]:
    """Config options a page defines itself as an example (a yaml block headed ``# conf/GROUP/NAME.yaml``)."""
    return {f"{g}={n}" for g, n in re.findall(r"#\s*(?:my_)?conf/(\w+)/(\w+)\.yaml", text)}


def _overrides(cmd: str) -> list[str]:
    """The Hydra overrides a command composes (a sweep: each swept setting at its first value)."""
    words = shlex.split(cmd, comments=True)
    if words[:2] == ["face", "evaluate"]:
        from face.cli import _aspect_names, _parser

        args = _parser().parse_args(words[1:])
        aspects = _aspect_names(args.aspects)  # its form (the names: the dataset's, with its aspects file)
        return ["experiment=evaluate", "dataset.path=x.jsonl", f"llm={args.llm}",
                f"aspects=[{','.join(aspects)}]", *args.overrides]
    args = [w for w in words[2:] if w not in ("-m", "--multirun") and not w.startswith("hydra.")]
    parsed = OverridesParser.create().parse_overrides(args)
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
            else o.input_line for o in parsed]


CASES = [(page.name, cmd) for page in PAGES for text in [page.read_text(encoding="utf-8")] for cmd in _commands(text)
         if "--help" not in cmd and "--cfg" not in cmd and not _defined_by(text) & set(shlex.split(cmd, comments=True))]


def test_the_pages_show_commands_at_all():
    assert len(CASES) >= 30, CASES  # the extractor finds what the pages show
    assert {page for page, _ in CASES} >= {"README.md", "live_llm.md", "optimizer.md"}


@pytest.mark.slow
def test_every_command_the_docs_show_composes():
    problems, seen = [], set()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for page, cmd in CASES:
            try:
                overrides = _overrides(cmd)
                if tuple(overrides) in seen:  # the same settings shown twice: composed once
                    continue
                seen.add(tuple(overrides))
                compose(config_name="config", overrides=overrides)
            except (Exception, SystemExit) as e:  # argparse exits on a bad face evaluate option
                problems.append(f"{page}: {cmd}\n    {str(e).strip().splitlines()[0] if str(e).strip() else e!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_points_at_a_file(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = [target for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
              if not target.startswith(("http:", "https:", "mailto:")) and not (page.parent / target).exists()]
    assert broken == []


# ---------------------------------------------------------------- the README's tour, as a new user runs it

def _tour() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## A tour"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def _ignored(path: str) -> bool:
    """Whether git ignores ``path`` (relative to the repository), as a fresh clone's ``git status`` would."""
    import subprocess

    res = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True)
    return res.returncode == 0


def test_the_tour_starts_in_the_projects_environment_and_names_only_configs_and_targets_that_exist():
    """Pasted line by line into a new shell after `make run`: its first line activates .venv (without it `python`
    has no hydra and `face` is "command not found"), which the set-up section says too; every config group option
    (`experiment=`, `llm=`, `--llm`, ...) is a file of conf/, every `make` target one of the Makefile's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = _tour()
    assert tour[0] == ". .venv/bin/activate", tour[0]
    assert ". .venv/bin/activate" in text[:text.index("## What the main job")]  # the set-up section
    groups = {p.name for p in (ROOT / "conf").iterdir() if p.is_dir()}
    targets = set(re.findall(r"(?m)^([\w-]+):", (ROOT / "Makefile").read_text()))
    named = []
    for cmd in tour[1:]:
        words = shlex.split(cmd)
        if words[0] == "make":
            assert words[1] in targets, cmd
        options = [w.split("=", 1) for w in words if "=" in w and w.split("=", 1)[0] in groups]
        if words[:2] == ["face", "evaluate"]:
            options.append(["llm", words[words.index("--llm") + 1]])
        missing = [f"{g}={v}" for g, values in options for v in values.split(",")
                   if not (ROOT / "conf" / g / f"{v}.yaml").is_file()]  # a sweep: each of its values
        assert missing == [], cmd
        named += [tuple(o) for o in options]
    assert ("experiment", "optimize_instructions") in named and ("llm", "scripted") in named  # it looked


def test_every_tour_command_names_files_that_exist_and_writes_where_git_does_not_look():
    tour = _tour()
    assert len(tour) == 9 and sum(c.startswith("python scripts/run.py") for c in tour) == 4, tour
    for cmd in tour:
        words = shlex.split(cmd)
        if words[:2] == ["face", "evaluate"]:
            from face.cli import _parser

            args = _parser().parse_args(words[1:])
            assert (ROOT / args.logs).is_file(), f"the tour's input {args.logs} is not in the repository"
            assert args.out and _ignored(f"{args.out}/report.html"), f"{args.out} is not ignored by git"
        if words[:2] == ["face", "compare"]:
            assert all(_ignored(f"{run}/report.html") for run in words[2:] if not run.startswith("-")), cmd
            assert _ignored("face-runs/compare_a_vs_b/report.html")  # where face compare writes by default
        assert not any(w.startswith(("paths.", "hydra.run", "report.out_dir", "++")) for w in words), cmd
    for generated in ("outputs/x/results/table.md", "multirun/x/sweep_report.md", "mlflow.db", "runs/v2/report.html",
                      "face-runs/moviebot-a/report.html"):
        assert _ignored(generated), f"{generated} would show in git status"


def test_the_sample_logs_are_the_docs_chat_format_with_two_made_up_systems():
    from face.datasets.chatlogs import load_logs

    convs = load_logs(ROOT / "docs" / "examples" / "sample_logs.jsonl")
    assert len(convs) >= 4 and {c.system for c in convs} == {"moviebot-a", "moviebot-b"}
    assert all(len(c.assistant_turns()) >= 2 for c in convs)


@pytest.mark.slow  # the tour's `face evaluate` ×2 and `face compare` as written (scripted server): ≈ 30–80 s
def test_the_tours_face_commands_run_as_written_from_a_clone(tmp_path, monkeypatch, capsys):
    from face.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "examples").symlink_to(ROOT / "docs" / "examples")
    monkeypatch.chdir(tmp_path)  # the clone's root: the commands' relative paths read from here
    monkeypatch.setenv("FACE_CACHE_DIR", str(tmp_path / "cache"))
    cmds = [c for c in _tour() if c.startswith("face ")]
    assert [shlex.split(c)[1] for c in cmds] == ["evaluate", "evaluate", "compare"]
    for cmd in cmds:
        assert main(shlex.split(cmd)[1:]) == 0, cmd
    for system in ("moviebot-a", "moviebot-b"):
        assert (tmp_path / "face-runs" / system / "report.html").is_file()
    out = capsys.readouterr().out
    assert "face compare: moviebot-a vs moviebot-b" in out and "| relevance | moviebot-a | moviebot-b |" in out


def test_the_api_docs_list_each_aspect_as_a_scorer_of_its_level():
    """docs/api.md's MLflow section: dialogue-level aspects are session-level scorers, turn-level ones trace-level."""
    from face.datasets.crsarena import ASPECTS

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").replace("\n  ", " ")
    listed = {}
    for level in ("dialogue", "turn"):
        line = re.search(rf"\* A \*\*{level}-level\*\* aspect \(([^)]*)\)", text).group(1)
        listed[level] = set(re.findall(r"`(\w+)`", line))
    assert listed == {level: {a for a, spec in ASPECTS.items() if spec.level == level} for level in listed}
