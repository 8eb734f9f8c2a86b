"""The skeleton every experiment shares: validate and build (dataset, methods, aspects, output paths)
before anything is fetched, written or sent; then fetch + load the data, open tracking, and hand the
experiment a ``Context`` with the few calls it needs (predict, evaluate, published, save_run).

Only an experiment's full-data run writes to ``results/<task_name>``; a subset (``dataset.limit``,
``systems``, ``splits``, ``file``) writes to ``<run dir>/results`` so committed results are never
overwritten by it (``report.out_dir`` overrides both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face import console
from face.aspects import Aspect
from face.data import ensure_data
from face.data.fetch import data_checksums
from face.data.schema import Conversation
from face.errors import ConfigError, DataError, import_class, require_writable_dir
from face.files import digest_files, digest_settings, dir_lock, write_marker
from face.llm import LLMConfig
from face.metaeval import LEVELS, meta_evaluate
from face.methods import Inputs, Method, MethodOutput, build
from face.methods.job import ESTIMATE_CONSOLE
from face.runfile import write_run_file
from face.tracking import Tracker, check_tracking_store

log = logging.getLogger(__name__)

# utterances longer than this (characters, ~4 per token) are reported before anything is sent;
# set +checks.max_utterance_chars=N (or null to switch the check off)
MAX_UTTERANCE_CHARS = 20_000



@dataclass
class Context:
    cfg: DictConfig
    dataset: object  # face.datasets.Dataset
    methods: dict[str, Method]  # name -> method (one, or the variants of a variants experiment)
    convs: list[Conversation]
    aspects: list[Aspect]
    splits: list[str]  # splits to meta-evaluate (the dataset's, then "all")
    data_dir: Path
    out_dir: Path  # tables and figures
    run_dir: Path  # run files, per-particle files (Hydra output dir)
    subset: str  # human-readable description of the data used
    tracker: Tracker
    has_labels: bool = True  # False for user conversations without human labels: predict only
    extra: dict = field(default_factory=dict)
    llm: LLMConfig | None = None  # conf/llm as LLMConfig: built and checked once, before anything runs

    @property
    def method(self) -> Method:
        return next(iter(self.methods.values()))

    def inputs(self) -> Inputs:
        llm = self.llm
        if llm is not None and not llm.usage_file:  # written even when the run stops early
            llm = dataclasses.replace(llm, usage_file=str(self.run_dir / "llm_usage.json"))
        return Inputs(self.dataset, self.convs, self.aspects, self.data_dir, self.run_dir, llm, self.tracker)

    def predict(self, method: Method | None = None) -> MethodOutput:
        return (method or self.method).predict(self.inputs())

    def predict_logged(self) -> MethodOutput:
        """The method's predictions, its artifacts and metrics logged; after a dry run it says nothing was sent."""
        out = self.predict()
        self.tracker.log_artifacts(out.artifacts, "run")
        self.tracker.log_metrics(out.metrics)
        if out.dry_run and ESTIMATE_CONSOLE.get() != "estimate":  # face evaluate's estimate step: no banner
            print(f"Dry run: nothing was sent. {out.label}", flush=True)
        return out

    def evaluate(self, preds, levels: Sequence[str] = LEVELS, n_boot: int | None = None,
                 splits: Sequence[str] | None = None) -> pd.DataFrame:
        m = self.cfg.metaeval
        return meta_evaluate(preds, self.convs, self.aspects, list(splits or self.splits), levels,
                             m.n_boot if n_boot is None else n_boot, self.cfg.seed, m.confidence)

    def predict_and_evaluate(self, name: str, method: Method, levels: Sequence[str] = LEVELS,
                             ) -> tuple[MethodOutput, pd.DataFrame | None]:
        """One of several methods: predictions, their metrics and artifacts logged under ``name``, and their
        correlations (None after a dry run), logged as ``<name>.<metric>``."""
        from face.tracking import correlation_metrics

        out = self.predict(method)
        self.tracker.log_metrics({f"{name}.{k}": v for k, v in out.metrics.items()})
        self.tracker.log_artifacts(out.artifacts, f"run/{name}")
        if out.dry_run:
            return out, None
        res = self.evaluate(out.predictions, levels=levels)
        self.tracker.log_metrics(correlation_metrics(res, prefix=f"{name}."))
        return out, res

    def published(self) -> pd.DataFrame:
        return self.dataset.published(self.data_dir)

    def log_results(self, results: pd.DataFrame, label: str, prefix: str = "") -> None:
        """Correlations as MLflow metrics, a few summary metrics for the runs table, and the run's description."""
        from face.tracking import correlation_metrics, description, summary_metrics

        self.tracker.log_metrics(correlation_metrics(results, prefix))
        if not prefix:
            self.tracker.log_metrics(summary_metrics(results))
            self.tracker.describe(description(results, label, self.subset))

    def save_run(self, preds, name: str = "run_file.json") -> Path:
        path = write_run_file(preds, self.run_dir / name)
        self.tracker.log_artifacts([path], "run")
        return path


def released_scores(ctx: Context, why: str) -> pd.DataFrame:
    """The released per-particle scores, for the experiments that re-aggregate them (method face_released)."""
    from face.pipeline.released import FaceReleased

    if not isinstance(ctx.method, FaceReleased):
        raise ValueError(f"{ctx.cfg.task_name} {why}: use method=face_released")
    return ctx.method.load(ctx.inputs())


# settings that say where things go or how they are shown, not what is computed
_NOT_SETTINGS = ("paths.", "tracking.", "hydra.", "report.", "dataset.download", "llm.progress", "llm.cache_dir",
                 "checks.")


def non_default_settings(cfg: DictConfig) -> dict[str, str]:
    """Every setting that differs from the experiment's default configuration (``experiment=<task_name>``), as
    ``key -> value``: they go into captions and the MLflow run name, and send the outputs to the run directory.
    A config group swapped for another of its configs counts as one setting (``llm=openai``); the keys of the
    new config are then compared with that config's own defaults. An experiment that cannot be composed on its
    own (e.g. from a searchpath) counts as all-default."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from face.tracking import flatten

    def default_with(overrides: list[str]):
        if GlobalHydra.instance().is_initialized():  # inside scripts/run.py's Hydra app: its config search path
            return compose(config_name="config", overrides=overrides)
        with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)

    groups = (("dataset", "dataset.name"), ("method", "method.name"), ("llm", "llm.backend"))
    try:
        default = default_with([f"experiment={cfg.task_name}"])
    except Exception:
        log.warning("could not compose the default configuration of %r: every setting counts as default",
                    cfg.task_name)
        return {}
    swaps = {g: str(OmegaConf.select(cfg, key)) for g, key in groups
             if OmegaConf.select(cfg, key, default=None) != OmegaConf.select(default, key, default=None)}
    if swaps:
        try:
            default = default_with([f"experiment={cfg.task_name}", *(f"{g}={v}" for g, v in swaps.items())])
        except Exception:  # a config name that is not a file of its group: compare key by key
            swaps = {}
    mine = flatten(OmegaConf.to_container(cfg, resolve=False))
    base = flatten(OmegaConf.to_container(default, resolve=False))
    out = dict(swaps)
    for k in sorted(set(mine) - set(base)):
        if not k.startswith(_NOT_SETTINGS):
            print(f"warning: setting {k} is not part of experiment {cfg.task_name}'s configuration; no code reads it",
                  file=sys.stderr, flush=True)
    for k in sorted(set(mine) | set(base)):
        if k.startswith(_NOT_SETTINGS) or mine.get(k, "<absent>") == base.get(k, "<absent>"):
            continue
        v = mine.get(k, "<absent>")
        out[k] = Path(v).name if isinstance(v, str) and os.path.isabs(v) else str(v)
    return _without_default_aspects(cfg, out)


def _without_default_aspects(cfg: DictConfig, settings: dict[str, str]) -> dict[str, str]:
    """``settings`` without ``aspects`` when it names exactly the dataset's default aspects in their order (what
    ``aspects: null`` means; ``face evaluate`` without --aspects names them): not a setting that differs."""
    try:
        ds = build(cfg.dataset)
        same = [a.name for a in ds.resolve_aspects(cfg.get("aspects"))] == [a.name for a in ds.resolve_aspects(None)]
    except Exception:  # an invalid list is reported where the run checks it, not here
        same = False
    return {k: v for k, v in settings.items() if not (k == "aspects" and same)}


def data_source(files: Sequence[str]) -> str:
    """Where a dataset comes from, for MLflow: its data files by name (a machine's data directory is not part
    of it; ``FACE_DATA_DIR`` says where they are)."""
    return "data/raw/" + ",".join(sorted(Path(f).name for f in files))[:400]


def run_owner(cfg: DictConfig) -> dict[str, str]:
    """What makes two runs the same run (the ownership marker ``.face-run.json`` of a run directory): a digest of
    the settings that decide the results (not where things go, nor how they are shown) and of the input file
    (``dataset.path``, by its bytes: the same file moved elsewhere is the same input)."""
    from face.tracking import flatten

    flat = flatten(OmegaConf.to_container(cfg, resolve=False))
    settings = {k: v for k, v in flat.items()
                if not k.startswith(_NOT_SETTINGS) and k not in ("dataset.path", "llm.dry_run")}
    path = OmegaConf.select(cfg, "dataset.path", default=None, throw_on_missing=False)
    owner = {"settings": digest_settings(settings)}
    if isinstance(path, str) and os.path.isfile(path):
        owner["input"] = digest_files([path])
    return owner


def without_llm_settings(settings: dict[str, str]) -> dict[str, str]:
    """The settings that matter to a run that calls no LLM: without ``llm=...`` and the ``llm.*`` / ``run_size.*``
    keys (an experiment that re-aggregates released scores is the same run under any LLM)."""
    return {k: v for k, v in settings.items()
            if k not in ("llm", "run_size") and not k.startswith(("llm.", "run_size."))}


def settings_text(settings: dict[str, str]) -> str:
    return ("non-default settings: " + ", ".join(f"{k}={v}" for k, v in settings.items())) if settings else ""


def run_name(task: str, settings: dict[str, str]) -> str:
    """``<experiment> key=value ...``: the last part of each key where that is unambiguous."""
    tails = [k.rsplit(".", 1)[-1] for k in settings]
    names = [t if tails.count(t) == 1 else k for t, k in zip(tails, settings)]
    return " ".join([task, *(f"{n}={v}" for n, v in zip(names, settings.values()))])[:250]


def out_dir_for(cfg: DictConfig, dataset, settings: dict[str, str] | None = None) -> Path:
    """``results/<task_name>`` for the experiment's default configuration on the full data only, outside a
    multirun; anything else writes into its own run directory (``report.out_dir`` overrides both)."""
    from face.tracking import is_multirun

    if cfg.report.get("out_dir"):
        return Path(cfg.report.out_dir)
    if dataset.is_subset or settings or is_multirun():  # a sweep job (even the default one) keeps to its job dir
        return Path(cfg.paths.output_dir) / "results"
    return Path(cfg.paths.results_dir) / cfg.task_name


def _splits(cfg: DictConfig, dataset) -> list[str]:
    wanted = cfg.metaeval.get("splits")
    if not wanted:
        return dataset.eval_splits()
    unknown = sorted(set(wanted) - set(dataset.eval_splits()) - {"all"})
    if unknown:
        raise ValueError(f"metaeval.splits {unknown} are not splits of {dataset.title} ({dataset.eval_splits()})")
    return list(wanted)


@contextmanager
def experiment(cfg: DictConfig, extra_files: Sequence[str] = (),
               method_cfgs: dict[str, DictConfig] | None = None) -> Iterator[Context]:
    """Validate, fetch, load, track. ``method_cfgs``: several methods (name -> config) instead of ``cfg.method``.

    Every setting is checked (``ConfigError``: one line naming it) before anything is fetched, written or
    sent; the MLflow run opens only after that. A run that ends well prints one summary block (face.console)."""
    summary = console.RunSummary()
    try:
        llm = check_settings(cfg, method_cfgs)
        dataset = build(cfg.dataset)
        methods = {name: build(node) for name, node in (method_cfgs or {cfg.method.name: cfg.method}).items()}
        aspects = dataset.resolve_aspects(cfg.get("aspects"))
        uses_llm = any(_uses_llm(m) for m in methods.values())
        files = list(dict.fromkeys([*dataset.files(), *[f for m in methods.values()
                                                        for f in m.required_files(dataset, aspects)], *extra_files,
                                    *(llm_server_files(cfg) if uses_llm else [])]))
        splits = _splits(cfg, dataset)
        settings = non_default_settings(cfg)
        out_dir, run_dir = out_dir_for(cfg, dataset, settings), Path(cfg.paths.output_dir)
        label = settings if uses_llm else without_llm_settings(settings)  # run name and captions
        check_paths(cfg, out_dir, run_dir, uses_llm=any(_uses_llm(m) for m in methods.values()))
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        if isinstance(e, DataError):
            raise
        raise ConfigError(str(e).strip("'\"")) from e
    data_dir = Path(cfg.paths.data_dir)
    with contextlib.ExitStack() as owned:  # the run's directories are this run's until it ends
        owned.enter_context(dir_lock(run_dir, "paths.output_dir (hydra.run.dir)"))
        owned.enter_context(dir_lock(out_dir, "report.out_dir" if cfg.report.get("out_dir") else "paths.results_dir"))
        results = Path(cfg.paths.results_dir).resolve()
        if results != run_dir.resolve() and results not in run_dir.resolve().parents:  # results/: the lock only
            write_marker(run_dir, run_owner(cfg))
        owned.enter_context(console.alive(cfg.task_name))  # in a log: a line every 30 s while the run lasts
        tracker = owned.enter_context(Tracker(cfg, run_name(cfg.task_name, label), uses_llm))
        tracker.log_config()
        ensure_data(data_dir, files, cfg.paths.get("data_mirror"), dataset.download)
        tracker.log_checksums(data_checksums(files))
        all_convs = dataset.load_all(data_dir)
        convs = dataset.select(all_convs)
        if not convs:
            raise ConfigError(f"the dataset selection (limit={dataset.limit}, systems={dataset.systems}, "
                              f"splits={dataset.splits}) matches no conversation of {dataset.title}")
        check_utterances(convs, cfg)
        tracker.log_dataset(dataset.title, [{"conv_id": c.conv_id, "system": c.system, "split": c.split,
                                             "evaluated_turns": len(c.evaluated_turns())} for c in convs],
                            data_checksums(files), data_source(dataset.files()))
        n_turns = sum(len(c.evaluated_turns()) for c in convs)
        subset = (f"{dataset.title}, {len(convs)} of {len(all_convs)} conversations, {n_turns} assistant turns"
                  + (" (subset)" if dataset.is_subset else "") + (f"; {settings_text(label)}" if label else ""))
        has_labels = any(c.labels or any(t.labels for t in c.turns) for c in convs)
        log.info("%s; results -> %s", subset, out_dir)
        summary.results, summary.run_dir, summary.tracking = out_dir.resolve(), run_dir.resolve(), tracker.enabled
        summary.run_id, summary.experiment_id = tracker.run_id, getattr(tracker, "experiment_id", None)
        summary.ui = mlflow_ui_command(cfg)
        with console.collect(summary):
            yield Context(cfg, dataset, methods, convs, aspects, splits, data_dir, out_dir, run_dir, subset, tracker,
                          has_labels, llm=llm)
    console.finish(summary)


def mlflow_ui_command(cfg: DictConfig) -> str:
    """How to open the MLflow UI on the run's store: ``make mlflow-ui`` for the project's own ``mlflow.db``."""
    uri = str(_setting(cfg, "tracking.tracking_uri", "") or "")
    own = f"sqlite:///{Path(cfg.paths.root_dir).resolve() / 'mlflow.db'}"
    return "make mlflow-ui" if uri in ("", own) else f"mlflow ui --backend-store-uri {uri} --port 5000"


# ---------------------------------------------------------------- checks before anything runs
def _setting(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# (key in the method config, kind, lowest allowed value, may be null)
_METHOD_NUMBERS = (("n", "int", 1, False), ("temperature", "num", 0, True), ("max_tokens", "int", 1, True),
                   ("top_logprobs", "int", 0, True), ("particles.k", "int", 1, False),
                   ("particles.max_extra", "int", 0, True), ("particles.temperature", "num", 0, True),
                   ("particles.max_tokens", "int", 1, True), ("instructions.max", "int", 1, True))


def check_settings(cfg: DictConfig, method_cfgs: dict[str, DictConfig] | None = None) -> LLMConfig | None:
    """Settings the builders do not check themselves (or check only after something was sent; the dataset checks its
    own selection, the methods their own settings when built); returns the LLM
    settings typed (``LLMConfig``, checked here once), or None for a configuration without ``llm``."""
    n_boot = _setting(cfg, "metaeval.n_boot", 0)
    if not _is_int(n_boot) or n_boot < 0:
        raise ConfigError(f"metaeval.n_boot must be an integer >= 0 (0 = no confidence intervals), got {n_boot!r}")
    conf = _setting(cfg, "metaeval.confidence", 0.95)
    if not _is_num(conf) or not 0 < conf < 1:
        raise ConfigError(f"metaeval.confidence must be a number in (0, 1), got {conf!r}")
    if not _is_int(_setting(cfg, "seed", 0)):
        raise ConfigError(f"seed must be an integer, got {_setting(cfg, 'seed')!r}")
    for name, node in (method_cfgs or {"method": cfg.method}).items():
        prefix = "method" if method_cfgs is None else f"{name} (method)"
        for key, kind, lo, nullable in _METHOD_NUMBERS:
            v = OmegaConf.select(node, key, default="<absent>")
            if v == "<absent>" or (v is None and nullable):
                continue
            ok = (_is_int(v) if kind == "int" else _is_num(v)) and v >= lo
            if not ok:
                what = "an integer" if kind == "int" else "a number"
                raise ConfigError(f"{prefix}.{key} must be {what} >= {lo}{' or null' if nullable else ''}, got {v!r}")
    llm = None
    if "llm" in cfg:
        try:
            llm = LLMConfig.from_dict(cfg.llm)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    max_chars = _setting(cfg, "checks.max_utterance_chars", MAX_UTTERANCE_CHARS)
    if max_chars is not None and (not _is_int(max_chars) or max_chars < 1):
        raise ConfigError(f"checks.max_utterance_chars must be a positive integer or null, got {max_chars!r}")
    return llm


def llm_server_files(cfg: DictConfig) -> list[str]:
    """Data files the configured LLM server reads (its class's ``data_files``; the replay judge's released
    judgements), fetched with the experiment's own before anything runs."""
    target = _setting(cfg, "llm.server._target_")
    if not target:
        return []
    return list(getattr(import_class(target, "llm.server._target_"), "data_files", ()))


def _uses_llm(method) -> bool:
    """Does the method call an LLM? Its declared ``uses_llm`` (a method without one does not)."""
    return bool(getattr(method, "uses_llm", False))


def check_paths(cfg: DictConfig, out_dir: Path, run_dir: Path, uses_llm: bool) -> None:
    """Output directories, the LLM cache and the MLflow store, before anything is fetched, written or sent."""
    require_writable_dir(out_dir, "report.out_dir" if cfg.report.get("out_dir") else "paths.results_dir")
    require_writable_dir(run_dir, "paths.output_dir (hydra.run.dir)")
    require_writable_dir(Path(cfg.paths.data_dir), "paths.data_dir")
    if uses_llm and _setting(cfg, "llm.cache", False) and _setting(cfg, "llm.cache_dir"):
        from face.llm.cache import check_cache_dir

        try:
            check_cache_dir(cfg.llm.cache_dir)
        except ValueError as e:
            raise ConfigError(f"llm.cache_dir: {e}") from None
    if _setting(cfg, "tracking.enabled", False):
        try:
            check_tracking_store(cfg)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def check_utterances(convs: Sequence[Conversation], cfg: DictConfig) -> list[str]:
    """Utterances far over a model's context are reported before anything is sent (one line each, the
    first 5): the rule is a plain size limit, ``checks.max_utterance_chars`` (default 20,000 characters,
    ~5,000 tokens); nothing is truncated."""
    limit = _setting(cfg, "checks.max_utterance_chars", MAX_UTTERANCE_CHARS)
    if limit is None:
        return []
    long = [(c.conv_id, t.turn_ind, len(t.utterance)) for c in convs for t in c.turns if len(t.utterance) > limit]
    lines = [f"warning: conversation {cid!r}, turn_ind {ti}: utterance of {n:,} characters (~{n // 4:,} tokens) "
             f"is over checks.max_utterance_chars={limit:,}; it is sent as it is" for cid, ti, n in long]
    for line in lines[:5]:
        print(line, file=sys.stderr, flush=True)
    if len(lines) > 5:
        print(f"warning: {len(lines) - 5} more utterances over checks.max_utterance_chars", file=sys.stderr)
    return lines
