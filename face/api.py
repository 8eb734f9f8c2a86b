"""FACE as a Python library: ``face.evaluate``, ``face.estimate``, ``face.meta_evaluate`` (exported by ``face``).

The same engine as ``face evaluate`` and ``scripts/run.py experiment=crsarena_main``: the conversations become the
``chat_logs`` dataset (or a dataset is named: ``"crsarena_eval"``), the settings are composed into the same Hydra
configuration (no Hydra on the caller's side), checked by the same code before anything is sent or written, every
LLM answer goes through the same cache (``data/cache/llm``: a rerun is free) and a budget (``llm.max_cost_usd``,
``llm.max_calls``) stops the run the same way. A stop is an exception, never an exit: ``ConfigError`` /
``DataError`` (a bad setting or input, nothing sent), ``BudgetExceeded``, ``LLMCallError`` / ``LLMRequestRefused``
(an LLM request failed), ``KeyboardInterrupt``.

Settings are the configuration's own names, given as keyword arguments: a config group by its name
(``run_size="tiny"``, ``method="face_released"``), any key by its dotted name (``**{"method.scoring.n": 3}``) or as
a nested dict (``method={"scoring": {"n": 3}}`` is ``method.scoring.n=3``). See docs/api.md.

Called inside a running event loop (Jupyter), the run goes to a worker thread and the call blocks until it ends.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from face.errors import ConfigError, DataError

if TYPE_CHECKING:  # pandas is imported where it is used: `face --help` stays quick
    import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
LEVELS = ("turn", "dialogue", "system")

# conversations: a JSON / JSONL file (chat format or CRSArena-Eval's), chat-format dicts, bare message lists,
# face.data.schema.Conversation objects, or a DataFrame of messages (one row each: conv_id, role, content)
Conversations = Union[str, os.PathLike, Sequence[Any], "pd.DataFrame"]

# what face.evaluate / `face evaluate` write into their output directory (a name ending in / is a directory)
OUTPUTS = ("run_file.json", "particles.jsonl", "particle_scores.jsonl", "cost_estimate.csv", "llm_usage.json",
           "conversations.json", "report.html", "report_tables/", "run_settings.json")

# settings the API sets from its own arguments
_OWN = {"experiment": "face.evaluate runs FACE on your conversations; the paper's experiments run with "
                      "scripts/run.py experiment=NAME",
        "dataset": "the conversations are the first argument", "dataset.path": "the conversations are the first "
        "argument", "dataset.limit": "use limit=", "aspects": "use aspects=", "paths.output_dir": "use out=",
        "report.out_dir": "use out=", "llm.dry_run": "use face.estimate (it sends nothing)", "task_name": "",
        "runner": "", "hydra": ""}

T = TypeVar("T")
# one run at a time per process: Hydra's composition is process-wide state (GlobalHydra), and so are the log redaction
# and the standard streams `quiet` redirects; a run itself sends its LLM requests concurrently
_RUN_LOCK = threading.RLock()


# ---------------------------------------------------------------- settings -> the configuration
def _groups() -> set[str]:
    return {p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra"}


def _flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"setting names are strings, got {key!r}")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if not value:
                raise ConfigError(f"setting {name}: an empty dict sets nothing")
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _render(value: Any, name: str) -> str:
    """``value`` in Hydra's override grammar, taken literally (a string is quoted: never a sweep, a
    ``${...}`` interpolation or another type)."""
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        value = value.item()  # a numpy scalar
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, (str, os.PathLike)):
        return hydra_value(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_render(v, name) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_render(v, name)}" for k, v in value.items()) + "}"
    raise ConfigError(f"setting {name}: a {type(value).__name__} cannot be a setting (use a string, number, bool, "
                      "None, list or dict)")


def hydra_value(value: str) -> str:
    """``value`` quoted for a Hydra override, taken literally: ``,`` ``'`` spaces and ``${...}`` stay as they are
    (a path is never a sweep, nor an interpolation that would read, say, an API key from the environment)."""
    from face.methods import escape_interpolation

    value = escape_interpolation(value)  # OmegaConf: \${ is a literal ${
    value = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)  # Hydra: a backslash before ' or the end
    return "'" + value.replace("'", "\\'") + "'"


def settings_overrides(settings: Mapping[str, Any]) -> list[str]:
    """Keyword settings as Hydra overrides: a config group by its config's name (``run_size="tiny"``), any other
    key by its dotted name, a nested dict flattened (``method={"scoring": {"n": 3}}`` is ``method.scoring.n=3``). A
    setting the API sets itself is refused, naming the argument to use."""
    groups, out = _groups(), []
    for name, value in _flatten(settings).items():
        if name in _OWN or name.split(".")[0] in ("hydra", "task_name", "runner"):
            why = _OWN.get(name) or "set by face.evaluate"
            raise ConfigError(f"setting {name}: {why}")
        if name in groups:
            if not isinstance(value, str) or not re.fullmatch(r"[\w.-]+", value):
                raise ConfigError(f"setting {name}: name one of the configs in conf/{name}/, got {value!r}")
            out.append(f"{name}={value}")
        else:
            out.append(f"{name}={_render(value, name)}")
    return out


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        raise ConfigError("face.evaluate cannot run inside a Hydra application (Hydra is already initialized); "
                          "call the experiment's runner instead")
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    except Exception as e:
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"bad setting: {line}") from None


# ---------------------------------------------------------------- conversations -> a file the dataset reads
IN_MEMORY = "conversations (in memory)"


def _frame_records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame of messages, one row each in order: ``conv_id`` (or ``id``), ``role`` (user / assistant /
    system), ``content`` (or ``utterance``), optionally ``system`` (the CRS's name)."""
    id_col = next((c for c in ("conv_id", "id") if c in df.columns), None)
    text_col = next((c for c in ("content", "utterance") if c in df.columns), None)
    missing = [what for what, col in (("conv_id (or id)", id_col), ("role", "role" if "role" in df.columns else None),
                                      ("content (or utterance)", text_col)) if col is None]
    if missing:
        raise DataError(IN_MEMORY, f"a DataFrame of messages needs the columns {', '.join(missing)} (one row per "
                                   f"message, in order); it has {', '.join(map(str, df.columns))}")
    convs: dict[str, dict] = {}
    for i, row in enumerate(df.itertuples(index=False)):
        values = row._asdict()
        cid = values[id_col]
        if not isinstance(cid, (str, int)) or isinstance(cid, bool):
            raise DataError(IN_MEMORY, f"conversation id {cid!r:.40} is not a string or an integer", f"row {i}")
        conv = convs.setdefault(str(cid), {"id": str(cid), "messages": []})
        if "system" in df.columns and values["system"] is not None and values["system"] == values["system"]:
            conv["system"] = values["system"]
        conv["messages"].append({"role": values["role"], "content": values[text_col]})
    return list(convs.values())


def _records(conversations: Sequence[Any]) -> list[Any]:
    from face.data.schema import Conversation

    out = []
    for c in conversations:
        if isinstance(c, Conversation):  # CRSArena-Eval's format, labels included
            out.append({"conv_id": c.conv_id, "system": c.system or None, "dialogue": [
                {"turn_ind": t.turn_ind, "role": t.role, "utterance": t.utterance,
                 **({"turn_level_aggregated": t.labels} if t.labels else {})} for t in c.turns],
                **({"dial_level_aggregated": c.labels} if c.labels else {})})
        else:
            out.append(c)
    return out


@dataclass(frozen=True)
class Source:
    """Where the conversations come from: a file (``own``: the caller's, else the in-memory input written to a
    temporary file) or, with ``dataset``, a dataset of ``conf/dataset/`` by name (``crsarena_eval``)."""

    path: Path | None
    own: bool = True
    dataset: str | None = None


def _datasets() -> list[str]:
    return sorted(p.stem for p in (CONF / "dataset").glob("*.yaml") if p.stem != "chat_logs")


def _input(conversations: Conversations, tmp: Path) -> Source:
    """The source the run reads; an in-memory input is written to ``tmp``."""
    import pandas as pd

    if isinstance(conversations, (str, os.PathLike)):
        if not str(conversations).strip():
            raise ConfigError("conversations: the path is empty")
        path = Path(os.fspath(conversations)).expanduser()
        if not path.exists() and str(conversations) in _datasets():  # a file of that name would win
            return Source(None, dataset=str(conversations))
        if not path.exists():
            raise DataError(path, f"file not found (nor is it the name of a dataset: {', '.join(_datasets())})")
        return Source(path.resolve())
    if isinstance(conversations, pd.DataFrame):
        records = _frame_records(conversations)
    elif isinstance(conversations, Sequence) and not isinstance(conversations, (bytes, str)):
        records = _records(conversations)
    else:
        raise ConfigError(f"conversations must be a path, a dataset name, a list of conversations or a DataFrame of "
                          f"messages, got {type(conversations).__name__}")
    if not records:
        raise DataError(IN_MEMORY, "contains no conversation")
    path = tmp / "conversations.json"
    try:
        text = json.dumps(records, ensure_ascii=False, indent=1, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DataError(IN_MEMORY, f"not JSON-serializable: {e}") from None
    path.write_text(text, encoding="utf-8")
    return Source(path, own=False)


def _load(source: Source) -> list:
    """Every conversation of a file, checked as ``face evaluate`` checks it (an in-memory input named as such); a
    dataset's are loaded by the run (its files are fetched first)."""
    from face.datasets.chatlogs import load_logs

    if source.path is None:
        return []
    try:
        return load_logs(source.path)
    except DataError as e:
        if source.own:
            raise
        raise DataError(IN_MEMORY, e.problem, e.record) from None


def _dataset_conversations(cfg) -> list:
    """The conversations the run evaluated: the dataset's selection (``limit``, ``systems``, ``splits``) of its
    conversations (a file's, or those a dataset fetched into the data directory)."""
    from face.methods import build

    ds = build(cfg.dataset)
    return ds.select(ds.load_all(Path(cfg.paths.data_dir)))


# ---------------------------------------------------------------- the result
@dataclass
class Result:
    """What ``face.evaluate`` returns. Tables are pandas DataFrames:

    * ``dialogues``: one row per conversation (``conv_id``, ``system``), a column per dialogue-level aspect;
    * ``turns``: one row per evaluated assistant turn (``conv_id``, ``system``, ``turn_ind``, ``utterance``), a
      column per turn-level aspect;
    * ``particles``: one row per aspect × particle × instruction: ``dialogue_act``, ``mention``, ``user_feedback``,
      ``instruction_id``, ``score`` (the expected score) and ``samples`` (the parsed draws; None = invalid);
    * ``correlations``: with human labels in the input, their correlations (``face.meta_evaluate``'s table), else
      None; ``estimate``: the cost estimate printed before the run; ``usage``: ``llm_usage.json`` (calls, tokens,
      cost, cache hits).

    A score is missing (NaN) where FACE has none: a turn without particles, as in the authors' code."""

    dialogues: pd.DataFrame
    turns: pd.DataFrame
    particles: pd.DataFrame
    conversations: list = field(repr=False)
    predictions: Any = field(repr=False)  # face.predictions.Predictions: (aspect, conv_id, [turn_ind], pred)
    aspects: list = field(repr=False)  # face.aspects.Aspect of each evaluated aspect
    label: str = ""  # what produced the numbers: the LLM, its settings and the samples
    llm: str = ""  # the LLM's model name
    settings: dict = field(default_factory=dict, repr=False)  # run_settings.json: label, llm, instructions
    usage: dict = field(default_factory=dict, repr=False)
    estimate: pd.DataFrame | None = field(default=None, repr=False)
    correlations: pd.DataFrame | None = field(default=None, repr=False)
    out_dir: Path | None = None  # where the run's files are (None: a temporary directory, removed)

    def to_run_file(self, path: str | os.PathLike) -> Path:
        """The predictions in the FACE authors' run-file format (their evaluation script reads it)."""
        from face.runfile import write_run_file

        return write_run_file(self.predictions, Path(path))

    def report(self, path: str | os.PathLike, tables: bool = False) -> Path:
        """The diagnostics report (HTML: every conversation -> turns -> particles, lowest scores highlighted);
        ``tables``: its tables as CSV too, in ``<path stem>_tables/``."""
        from face.data.schema import Particle
        from face.report.diagnostic_report import write_report

        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"report: {path} is a directory; name the HTML file to write")
        scores = self.particles.dropna(subset=["score"])
        particles: dict[tuple[str, int], list] = {}
        first = self.particles.drop_duplicates(["conv_id", "turn_ind", "particle_ind"])
        for r in first[first["particle_ind"] >= 0].sort_values(["conv_id", "turn_ind", "particle_ind"]).itertuples():
            particles.setdefault((r.conv_id, int(r.turn_ind)), []).append(
                Particle(r.dialogue_act, r.mention, r.user_feedback))
        return write_report(path, path.with_name(f"{path.stem}_tables") if tables else None, path.stem,
                            self.conversations, scores, particles, self.predictions,
                            {"label": self.label, "instructions": self.settings.get("instructions", {})},
                            run="face.evaluate", aspects=self.aspects)

    def lowest_particles(self, conv_id: str, aspect: str, turn_ind: int | None = None, k: int = 3) -> pd.DataFrame:
        """The ``k`` lowest-scoring particles of a conversation (or of one of its turns) for an aspect: one row each
        (``turn_ind``, ``particle_ind``, ``dialogue_act``, ``mention``, ``score`` = the mean over instructions)."""
        p = self.particles
        p = p[(p["aspect"] == aspect) & (p["conv_id"] == str(conv_id)) & (p["particle_ind"] >= 0)]
        if turn_ind is not None:
            p = p[p["turn_ind"] == turn_ind]
        per = (p.groupby(["turn_ind", "particle_ind", "dialogue_act", "mention"], dropna=False)["score"].mean()
               .reset_index())
        return per.sort_values(["score", "turn_ind", "particle_ind"]).head(k).reset_index(drop=True)

    def __repr__(self) -> str:
        aspects = ", ".join(a.name for a in self.aspects)
        where = f"; files in {self.out_dir}" if self.out_dir else ""
        return (f"face.Result({len(self.dialogues)} conversations, {len(self.turns)} assistant turns, "
                f"{self.particles[['conv_id', 'turn_ind', 'particle_ind']].drop_duplicates().shape[0]} particles; "
                f"aspects: {aspects}; {self.label}{where})")


def _wide(long: pd.DataFrame, keys: list[str], aspects: Sequence[Any]) -> pd.DataFrame:
    import pandas as pd

    names = [a.name for a in aspects]
    if long.empty:
        return pd.DataFrame(columns=[*keys, *names])
    wide = long.pivot_table(index=keys, columns="aspect", values="pred", aggfunc="first").reset_index()
    wide.columns.name = None
    return wide.reindex(columns=[*keys, *names])


def _with_released_particles(particles: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """The authors' scores (method face_released) with the particles they scored: act, mention, feedback."""
    from face.data import RELEASED_PARTICLES
    from face.datasets.face_released import load_released_particles

    if particles.empty or not (Path(data_dir) / RELEASED_PARTICLES).exists():
        return particles
    rows = {(t.conv_id, t.turn_ind, i): (p.dialogue_act, p.mention, p.user_feedback)
            for t in load_released_particles(Path(data_dir) / RELEASED_PARTICLES) for i, p in enumerate(t.particles)}
    keys = zip(particles["conv_id"], particles["turn_ind"], particles["particle_ind"])
    found = [rows.get((c, int(t), int(i)), (None, None, None)) for c, t, i in keys]
    for j, col in enumerate(("dialogue_act", "mention", "user_feedback")):
        particles[col] = [f[j] for f in found]
    return particles


def _result(out: Path, convs: list, aspects: list, ret: dict, keep: bool, data_dir: Path) -> Result:
    import pandas as pd

    from face.pipeline.records import DETAIL_FIELDS, read_score_file
    from face.report.diagnostic_report import read_run_settings

    columns = ["aspect", "conv_id", "turn_ind", "particle_ind", "instruction_id", "score", *DETAIL_FIELDS]

    preds = ret["output"].predictions
    turn_aspects = [a for a in aspects if a.level == "turn"]
    dial_aspects = [a for a in aspects if a.level == "dialogue"]
    meta = pd.DataFrame([(c.conv_id, c.system) for c in convs], columns=["conv_id", "system"])
    dialogues = meta.merge(_wide(preds.dialogue, ["conv_id"], dial_aspects), on="conv_id", how="left")
    turn_rows = [(c.conv_id, c.system, t.turn_ind, t.utterance) for c in convs for t in c.evaluated_turns()]
    turns = pd.DataFrame(turn_rows, columns=["conv_id", "system", "turn_ind", "utterance"])
    turns = turns.merge(_wide(preds.turn, ["conv_id", "turn_ind"], turn_aspects), on=["conv_id", "turn_ind"],
                        how="left")
    scores_file = out / "particle_scores.jsonl"
    if scores_file.exists():  # the live method streams them there
        particles = read_score_file(scores_file, detail=True)
    else:  # a method that keeps them in memory (face_released: the authors' scores), or none
        particles = ret["output"].particle_scores
        particles = pd.DataFrame(columns=columns) if particles is None else particles.copy()
        particles["conv_id"] = particles["conv_id"].astype(str)
        for col in columns:
            if col not in particles.columns:
                particles[col] = None
        particles = _with_released_particles(particles, data_dir)
    usage = json.loads((out / "llm_usage.json").read_text(encoding="utf-8")) if (out / "llm_usage.json").exists() \
        else {}
    estimate = pd.read_csv(out / "cost_estimate.csv") if (out / "cost_estimate.csv").exists() else None
    settings = read_run_settings(out / "run_settings.json")
    return Result(dialogues, turns, particles, list(convs), preds, list(aspects), ret["output"].label,
                  str(settings.get("llm", {}).get("model", "")), settings, usage, estimate, ret.get("results"),
                  out if keep else None)


# ---------------------------------------------------------------- running it
def _off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(...)`` here, or in a worker thread when this thread runs an event loop (Jupyter, an async app); Ctrl-C stops
    the worker's LLM client too (face.llm.client.run_off_loop)."""
    from face.llm.client import run_off_loop

    return run_off_loop(fn, *args, **kwargs)


def _config(source: Source, aspects: Sequence[str] | str | None, llm: str, out: Path, limit: int | None, mlflow: bool,
            settings: Mapping[str, Any], dry_run: bool = False):
    from face.secrets import secret_in_overrides, secret_setting

    if not isinstance(llm, str) or not re.fullmatch(r"[\w.-]+", llm):
        raise ConfigError(f"llm must name a config in conf/llm/ (local, openai, openai_compatible, scripted, replay, "
                          f"...), got {llm!r}; its settings go in as **{{'llm.base_url': ...}}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"limit must be a positive number of conversations, got {limit!r}")
    if isinstance(aspects, str):
        aspects = [aspects]
    own = settings_overrides(settings)
    bad = secret_in_overrides(own)  # a credential among the settings: refused before anything is composed
    if bad:
        raise ConfigError(bad)
    data = ([f"dataset={source.dataset}"] if source.dataset else
            ["dataset=chat_logs", f"dataset.path={hydra_value(str(source.path))}"])
    overrides = ["experiment=crsarena_main", *data,
                 f"llm={llm}", f"paths.output_dir={hydra_value(str(out))}", f"report.out_dir={hydra_value(str(out))}",
                 *([] if mlflow else ["tracking=none"]), *([f"dataset.limit={limit}"] if limit else []),
                 *([f"aspects={_render(list(aspects), 'aspects')}"] if aspects is not None else []),
                 *(["llm.dry_run=true", "tracking.enabled=false"] if dry_run else []), *own]
    cfg = _compose(overrides)
    bad = secret_setting(cfg)
    if bad:
        raise ConfigError(bad)
    return cfg


def _aspects(cfg) -> list:
    """The aspects the run evaluates, checked by the dataset (before anything runs)."""
    from face.methods import build

    try:
        return build(cfg.dataset).resolve_aspects(cfg.get("aspects"))
    except ValueError as e:
        raise ConfigError(str(e).strip("'\"")) from None


def _project_root() -> None:
    os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))  # paths.root_dir: the cache, data and mlflow.db


def evaluate(conversations: Conversations, aspects: Sequence[str] | str | None = None, llm: str = "local", *,
             out: str | os.PathLike | None = None, overwrite: bool = False, limit: int | None = None,
             mlflow: bool = False, quiet: bool = False, **settings: Any) -> Result:
    """Evaluate conversations with FACE: particles, their scores per aspect and instruction, turn and dialogue scores.

    Args:
        conversations: a JSON / JSON Lines file (chat format ``{"id", "system", "messages": [{"role", "content"}]}``
            or CRSArena-Eval's), a list of chat-format dicts (or bare message lists, or ``Conversation`` objects),
            a DataFrame of messages (one row each: ``conv_id``, ``role``, ``content``, optional ``system``), or the
            name of a dataset of ``conf/dataset/`` (``"crsarena_eval"``: its conversations and human labels, fetched
            into the data directory).
        aspects: CRSArena-Eval aspect names (``relevance``, ``interestingness``, ``understanding``,
            ``task_completion``, ``interest_arousal``, ``efficiency``, ``dialogue_overall``) and those of
            ``dataset.aspects_file`` (aspects of your own: docs/extending.md); None: CRSArena-Eval's seven.
        llm: a config of ``conf/llm/``: ``local`` (embedded, no key; no judging signal), ``openai``,
            ``openai_compatible``, ``replay``, ``scripted`` (a fake server for tests), or your own.
        out: keep the run's files there (run file, particles, per-particle scores, cost estimate, usage, report);
            None: a temporary directory, removed once the result is read. Rerunning the same conversations and
            settings into ``out`` resumes; another run's results there are refused unless ``overwrite``.
        limit: only the first ``limit`` conversations.
        mlflow: also log the run to MLflow (``tracking=mlflow``: ``sqlite:///mlflow.db`` of the project).
        quiet: print nothing (the cost estimate, tables and the run summary); warnings still go to stderr.
        **settings: any setting of the configuration (docs/api.md, "Settings"), e.g. ``run_size="tiny"``,
            ``**{"method.scoring.n": 3, "llm.max_cost_usd": 5}``.

    Returns: a ``Result``. Raises ``ConfigError`` / ``DataError`` before anything is sent or written, and
    ``BudgetExceeded``, ``LLMCallError``, ``LLMRequestRefused`` when the run stops. Calls from several threads
    run one at a time."""
    _project_root()
    return _off_loop(_locked, quiet, _evaluate, conversations, aspects, llm, out, overwrite, limit, mlflow, settings)


def _locked(quiet: bool, fn: Callable[..., T], *args: Any) -> T:
    import contextlib
    import io

    with _RUN_LOCK, (contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()):
        return fn(*args)


def _evaluate(conversations, aspects, llm, out, overwrite, limit, mlflow, settings) -> Result:
    from face.experiments.common import run_owner
    from face.files import claim_state, dir_lock, refuse_input_overwrite
    from face.runner import run_experiment

    tmp = Path(tempfile.mkdtemp(prefix="face-"))
    try:
        source = _input(conversations, tmp)
        _load(source)  # bad conversations: one DataError, before anything is written
        if out is not None and not str(out).strip():
            raise ConfigError("out: the path is empty")
        target = Path(os.path.abspath(os.fspath(out))) if out is not None else tmp / "run"
        cfg = _config(source, aspects, llm, target, limit, mlflow, settings)
        chosen = _aspects(cfg)
        from face.errors import require_writable_dir

        if source.path is not None and source.own:
            refuse_input_overwrite(target, [source.path], OUTPUTS, "out")
        require_writable_dir(target, "out")
        with dir_lock(target, "out"):
            state = claim_state(target, run_owner(cfg), "out", overwrite, OUTPUTS,
                                "pass overwrite=True to replace them")
            if state == "resume":
                print(f"Resuming the run in {target} (same conversations and settings; finished LLM calls come from "
                      "the cache).", flush=True)
            from face import console

            with console.held() as summaries:  # the summary block says where the results are: printed below
                ret = run_experiment(cfg)
            selected = _dataset_conversations(cfg)  # the dataset's selection (limit, systems, splits)
            if out is not None:
                from face.datasets.crsarena import write_conversations

                write_conversations(selected, target / "conversations.json")  # `face report DIR` reads it back
            result = _result(target, selected, chosen, ret, out is not None, Path(cfg.paths.data_dir))
            if out is not None and len(result.particles):  # as `face evaluate` leaves it
                result.report(target / "report.html", tables=True)
            for summary in summaries:
                if out is None:  # a temporary directory, removed below: the Result holds everything
                    summary.results = summary.run_dir = None
                    summary.extra.append(("Results", "the returned face.Result (out=None: no files kept)"))
                print(summary.text(), flush=True)
            return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def estimate(conversations: Conversations, aspects: Sequence[str] | str | None = None, llm: str = "local", *,
             limit: int | None = None, quiet: bool = False, **settings: Any) -> pd.DataFrame:
    """What ``face.evaluate`` with the same arguments would send, and cost: one row per stage (decomposition, each
    aspect's scoring) and a ``total`` row, with ``calls``, ``input_tokens``, ``output_tokens``, ``cost_usd`` (from
    ``llm.price_*_per_mtok``). Sends nothing, starts no server; answers already cached are still counted. The
    table is printed as the command prints it, unless ``quiet``."""
    _project_root()
    return _off_loop(_locked, quiet, _estimate, conversations, aspects, llm, limit, settings)


def check_settings(aspects: Sequence[str] | str | None = None, llm: str = "local", **settings: Any) -> list:
    """The aspects (``face.aspects.Aspect``) that ``face.evaluate(..., aspects, llm, **settings)`` would evaluate,
    after the checks it makes before anything runs (settings, LLM settings, credentials); ``ConfigError`` if one
    fails. Sends nothing, writes nothing: for a caller that builds now and evaluates later (the MLflow scorers)."""
    from face.experiments.common import check_settings as check
    from face.methods import build

    _project_root()
    with _RUN_LOCK, tempfile.TemporaryDirectory(prefix="face-") as tmp:
        cfg = _config(Source(Path(tmp) / "conversations.json"), aspects, llm, Path(tmp) / "run", None, False,
                      settings)
        check(cfg)
        build(cfg.method)  # the method's own settings (typed: a ConfigError names the key)
        return _aspects(cfg)


def _estimate(conversations, aspects, llm, limit, settings) -> pd.DataFrame:
    import pandas as pd

    from face import console
    from face.methods.job import estimate_console
    from face.runner import run_experiment

    tmp = Path(tempfile.mkdtemp(prefix="face-"))
    try:
        source = _input(conversations, tmp)
        _load(source)
        cfg = _config(source, aspects, llm, tmp / "run", limit, False, settings, dry_run=True)
        _aspects(cfg)
        with estimate_console("estimate"), console.silenced():
            run_experiment(cfg)
        return pd.read_csv(tmp / "run" / "cost_estimate.csv")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- meta-evaluation
def _with_labels(convs: list, labels: pd.DataFrame | str | os.PathLike) -> list:
    """The conversations with the human labels of ``labels``: a CRSArena-Eval file, or a DataFrame with columns
    ``conv_id``, ``aspect``, ``label`` and ``turn_ind`` (a turn-level label; absent or NaN: a dialogue label)."""
    import dataclasses

    import pandas as pd

    from face.datasets.crsarena import ASPECT_ALIASES, load_conversations

    if isinstance(labels, (str, os.PathLike)):
        by_id = {c.conv_id: c for c in load_conversations(Path(labels), require_labels=False)}
        rows = [(c.conv_id, None, a, v) for c in by_id.values() for a, v in c.labels.items()]
        rows += [(c.conv_id, t.turn_ind, a, v) for c in by_id.values() for t in c.turns for a, v in t.labels.items()]
        labels = pd.DataFrame(rows, columns=["conv_id", "turn_ind", "aspect", "label"])
    if not isinstance(labels, pd.DataFrame):
        raise ConfigError(f"labels must be a DataFrame (conv_id, [turn_ind], aspect, label) or a CRSArena-Eval file, "
                          f"got {type(labels).__name__}")
    missing = [c for c in ("conv_id", "aspect", "label") if c not in labels.columns]
    if missing:
        raise DataError("labels", f"missing columns {', '.join(missing)} (expected conv_id, aspect, label and, for "
                                  "turn-level labels, turn_ind)")
    known = {c.conv_id: c for c in convs}
    unknown = sorted(set(labels["conv_id"].astype(str)) - set(known))
    if unknown:
        raise DataError("labels", f"{len(unknown)} conversation(s) not in the result, e.g. {unknown[0]!r}")
    turn_labels: dict[tuple[str, int], dict] = {}
    dial_labels: dict[str, dict] = {}
    has_turn = "turn_ind" in labels.columns
    for i, r in enumerate(labels.itertuples(index=False)):
        value = float(r.label)
        if not math.isfinite(value):
            continue  # no label
        aspect = ASPECT_ALIASES.get(r.aspect, r.aspect)
        turn = getattr(r, "turn_ind", None) if has_turn else None
        if turn is None or (isinstance(turn, float) and math.isnan(turn)):
            dial_labels.setdefault(str(r.conv_id), {})[aspect] = value
        else:
            key = (str(r.conv_id), int(turn))
            if key[1] not in {t.turn_ind for t in known[key[0]].turns}:
                raise DataError("labels", f"conversation {key[0]!r} has no turn {key[1]}", f"row {i}")
            turn_labels.setdefault(key, {})[aspect] = value
    out = []
    for c in convs:
        turns = tuple(dataclasses.replace(t, labels=turn_labels.get((c.conv_id, t.turn_ind), {})) for t in c.turns)
        out.append(dataclasses.replace(c, turns=turns, labels=dial_labels.get(c.conv_id, {})))
    return out


def meta_evaluate(result: Result, labels: pd.DataFrame | str | os.PathLike | None = None, *,
                  levels: Sequence[str] = LEVELS, n_boot: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> pd.DataFrame:
    """Correlations of ``result``'s scores with human labels: Pearson, Spearman and Kendall with bootstrap CIs
    (resampling conversations), at turn and dialogue level (each aspect at its own) and system level (one mean per
    system; needs 2+ systems), per split of the conversations and pooled (``all``).

    ``labels``: None (the labels in the evaluated conversations, e.g. CRSArena-Eval's file), a CRSArena-Eval file,
    or a DataFrame with columns ``conv_id``, ``aspect``, ``label`` and ``turn_ind`` (absent or NaN: a dialogue
    label). Returns one row per level × aspect × split × coefficient: ``value``, ``p_value``, ``ci_low``,
    ``ci_high``, ``n`` (items with a prediction), ``n_missing`` (labelled items without one)."""
    from face.metaeval import meta_evaluate as correlate

    if not isinstance(result, Result):
        raise ConfigError(f"meta_evaluate takes the Result of face.evaluate, got {type(result).__name__}")
    bad = sorted(set(levels) - set(LEVELS))
    if bad or not levels:
        raise ConfigError(f"levels: {bad or 'none'} (choose from {', '.join(LEVELS)})")
    if not isinstance(n_boot, int) or isinstance(n_boot, bool) or n_boot < 0:
        raise ConfigError(f"n_boot must be an integer >= 0 (0 = no confidence intervals), got {n_boot!r}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    convs = result.conversations if labels is None else _with_labels(result.conversations, labels)
    if not any(c.labels or any(t.labels for t in c.turns) for c in convs):
        raise DataError("labels", "no human label for the evaluated conversations: pass labels= (a DataFrame or a "
                                  "CRSArena-Eval file)")
    splits = sorted({c.split for c in convs} - {"all"})
    splits = [*splits, "all"] if len(splits) != 1 else splits
    return correlate(result.predictions, convs, result.aspects, splits or ["all"], list(levels), n_boot, seed,
                     confidence)


__all__ = ["Conversations", "LEVELS", "OUTPUTS", "Result", "Source", "check_settings", "estimate", "evaluate",
           "hydra_value", "meta_evaluate", "settings_overrides"]
