"""The skeleton every experiment shares: validate and build (dataset, methods, aspects, output paths)
before anything is fetched, written or sent (``prepare``: a ``Plan``); then fetch + load the data, open tracking,
and hand the experiment its plan with the few calls it needs (predict, evaluate, published; ``result``: what it
computed, written by the one reporting stage, ``face.experiments.result.write``).

Only an experiment's full-data run writes to ``results/<task_name>``; a subset (``dataset.limit``,
``systems``, ``splits``, ``file``) writes to ``<run dir>/results`` so committed results are never
overwritten by it (``report.out_dir`` overrides both).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face import console
from face.aspects import Aspect
from face.data import ARENA_VOTES, ensure_data
from face.data.fetch import data_checksums
from face.data.schema import Conversation
from face.errors import ConfigError, DataError, closest_first, import_class, require_writable_dir
from face.experiments.naming import non_default_settings, run_name
from face.experiments.result import ExperimentResult, write
from face.experiments.settings import RunSettings
from face.llm import LLMConfig
from face.metaeval import LEVELS, meta_evaluate
from face.methods import Inputs, Method, MethodOutput, build
from face.tracking import Tracker, check_tracking_store, is_multirun

log = logging.getLogger(__name__)


def released_scores(ctx: Plan, why: str) -> pd.DataFrame:
    """The released per-particle scores, for the experiments that re-aggregate them (method face_released)."""
    from face.pipeline.released import FaceReleased

    if not isinstance(ctx.method, FaceReleased):
        raise ValueError(f"{ctx.cfg.task_name} {why}: use method=face_released")
    return ctx.method.load(ctx.inputs())


def arena_files(cfg: DictConfig) -> tuple[str, ...]:
    """The files of the arena votes ``arena.vote_sources`` names (ConfigError for a source there is not)."""
    unknown = [s for s in cfg.arena.vote_sources if s not in ARENA_VOTES]
    if unknown:
        raise ConfigError(f"arena.vote_sources: unknown {unknown}; choose from {sorted(ARENA_VOTES)}")
    return tuple(ARENA_VOTES[s] for s in cfg.arena.vote_sources)


def arena_votes(ctx: Plan) -> list:
    """The CRSArena-Dial votes of every source ``arena.vote_sources`` names."""
    from face.datasets.arena import load_votes

    return [v for s in ctx.cfg.arena.vote_sources for v in load_votes(ctx.data_dir / ARENA_VOTES[s], s)]


def own_settings(cls: Any, cfg: DictConfig, key: str) -> Any:
    """The experiment's own settings ``cfg.<key>`` typed by their ``@settings`` class (ConfigError naming the key)."""
    node = cfg.get(key)
    given: Any = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    return cls(**given)


def out_dir_for(cfg: DictConfig, run: RunSettings, dataset, settings: dict[str, str] | None = None) -> Path:
    """``results/<task_name>`` for the experiment's default configuration on the full data only, outside a
    multirun; anything else writes into its own run directory (``report.out_dir`` overrides both)."""
    if run.report.out_dir:
        return Path(run.report.out_dir)
    if dataset.is_subset or settings or is_multirun():  # a sweep job (even the default one) keeps to its job dir
        return Path(cfg.paths.output_dir) / "results"
    return Path(cfg.paths.results_dir) / cfg.task_name


@dataclass(frozen=True)
class Parts:
    """What an experiment needs beside the skeleton's dataset and ``cfg.method``: more data files, or several methods
    (name -> config) instead of ``cfg.method``. An experiment module with such needs defines ``parts(cfg) -> Parts``,
    which also checks the experiment's own settings (``ConfigError``); the runner checks them with the others."""

    extra_files: tuple[str, ...] = ()
    method_cfgs: dict[str, DictConfig] | None = None


@dataclass
class Plan:
    """A run's parts, built and checked (``prepare``) before anything is fetched, written or sent."""

    cfg: DictConfig
    llm: LLMConfig | None  # conf/llm typed (None: a configuration without llm)
    dataset: Any
    methods: dict[str, Method]
    aspects: list[Aspect]
    files: list[str]  # every data file the run reads (fetched first)
    splits: list[str]
    label: dict[str, str]  # the non-default settings that name the run (run name, captions)
    out_dir: Path  # tables and figures
    run_dir: Path  # run files (paths.output_dir)
    uses_llm: bool
    settings: RunSettings  # the run's own settings, typed (seed, aspects, metaeval, checks, report)
    summary: console.RunSummary = field(default_factory=console.RunSummary)  # the run's console (face.console)
    loaded: tuple[list[Conversation], list[Conversation]] | None = field(default=None, repr=False)  # ``load()``
    # set when the experiment runs (``experiment``): what it reads
    convs: list[Conversation] = field(default_factory=list, init=False, repr=False)  # the selected conversations
    subset: str = field(default="", init=False)  # human-readable description of the data used
    tracker: Tracker = field(init=False, repr=False, compare=False)

    @property
    def data_dir(self) -> Path:
        return Path(self.cfg.paths.data_dir)

    @property
    def method(self) -> Method:
        return next(iter(self.methods.values()))

    def result(self, **parts: Any) -> ExperimentResult:
        """The experiment's typed result — its ``parts`` (ExperimentResult's fields), with the run's directories and
        its LLM jobs' estimates and usage — reported by the one writer (``face.experiments.result.write``); face
        evaluate's estimate step prints no dry-run banner."""
        result = ExperimentResult(self.cfg.task_name, self.out_dir, self.run_dir, list(self.convs), list(self.aspects),
                                  dict(self.methods), estimates=list(self.summary.estimates),
                                  usage=list(self.summary.usage), **parts)
        return write(result, self.tracker, self.subset, banner=self.summary.estimate != "dry")

    def inputs(self) -> Inputs:
        llm = self.llm
        if llm is not None and not llm.usage_file:  # written even when the run stops early
            llm = dataclasses.replace(llm, usage_file=str(self.run_dir / "llm_usage.json"))
        return Inputs(self.dataset, self.convs, self.aspects, self.data_dir, self.run_dir, llm, self.tracker,
                      self.summary)

    def predict(self, method: Method | None = None) -> MethodOutput:
        return (method or self.method).predict(self.inputs())

    def evaluate(self, preds, levels: Sequence[str] = LEVELS, n_boot: int | None = None,
                 splits: Sequence[str] | None = None) -> pd.DataFrame:
        m = self.settings.metaeval
        return meta_evaluate(preds, self.convs, self.aspects, list(splits or self.splits), levels,
                             m.n_boot if n_boot is None else n_boot, self.settings.seed, m.confidence)

    def published(self) -> pd.DataFrame:
        return self.dataset.published(self.data_dir)

    def load(self) -> tuple[list[Conversation], list[Conversation]]:
        """The run's input, checked, as (every conversation, the selected ones): every data file fetched and
        verified, the conversations loaded and checked, a selection (``limit``, ``systems``, ``splits``) that is not
        empty. Loaded once: the runner loads it before it claims or writes anything, so that data that is bad, or
        cannot be fetched offline, leaves no run behind."""
        if self.loaded is None:
            ensure_data(self.data_dir, self.files, self.cfg.paths.get("data_mirror"), self.dataset.download)
            every = self.dataset.load_all(self.data_dir)
            chosen = self.dataset.select(every)
            if not chosen:
                raise ConfigError(f"the dataset selection (limit={self.dataset.limit}, systems={self.dataset.systems}, "
                                  f"splits={self.dataset.splits}) matches no conversation of {self.dataset.title}")
            self.loaded = (every, chosen)
        return self.loaded


def prepare(cfg: DictConfig, parts: Parts = Parts()) -> Plan:
    """Every setting checked and every part built (``ConfigError``: one line naming the setting); nothing fetched,
    written or sent."""
    try:
        run = RunSettings.of(cfg)
        llm = LLMConfig.from_dict(cfg.llm) if "llm" in cfg else None  # None: a configuration without llm
        dataset = build(cfg.dataset)
        methods = {name: build(node) for name, node in (parts.method_cfgs or {cfg.method.name: cfg.method}).items()}
        aspects = dataset.resolve_aspects(run.aspects)
        uses_llm = any(getattr(m, "uses_llm", False) for m in methods.values())  # a method declares it
        if uses_llm and llm is None:
            raise ConfigError("llm: the method calls an LLM and the configuration has none (removed with ~llm?); "
                              "choose one with llm=NAME")
        files = list(dict.fromkeys([*dataset.files(), *[f for m in methods.values()
                                                        for f in m.required_files(dataset, aspects)],
                                    *parts.extra_files, *(llm_server_files(cfg) if uses_llm else [])]))
        splits = list(run.metaeval.splits or dataset.eval_splits())
        unknown = sorted(set(splits) - set(dataset.eval_splits()) - {"all"})
        if unknown:
            raise ValueError(f"metaeval.splits {unknown} are not splits of {dataset.title} ({dataset.eval_splits()})")
        settings = non_default_settings(cfg)
        if [a.name for a in aspects] == [a.name for a in dataset.resolve_aspects(None)]:
            settings.pop("aspects", None)  # the dataset's own aspects named in full (face evaluate's): the default
        out_dir, run_dir = out_dir_for(cfg, run, dataset, settings), Path(cfg.paths.output_dir)
        # run name and captions; a run that calls no LLM (re-aggregating released scores) is the same under any LLM
        label = settings if uses_llm else {k: v for k, v in settings.items()
                                           if k not in ("llm", "run_size") and not k.startswith(("llm.", "run_size."))}
        check_paths(cfg, out_dir, run_dir, uses_llm, "report.out_dir" if run.report.out_dir else "paths.results_dir")
    except (ConfigError, DataError):
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(str(e).strip("'\"") if isinstance(e, KeyError) else str(e)) from e  # KeyError: its repr
    return Plan(cfg, llm, dataset, methods, aspects, files, splits, label, out_dir, run_dir, uses_llm, run)


@contextmanager
def experiment(plan: Plan) -> Iterator[Plan]:
    """The run the runner checked, claimed and loaded (``plan``; ``face.runner.run``): its MLflow run opens, the data
    (``Plan.load``: the runner loaded it already) is logged to it, and the experiment gets the plan with what it reads
    (``convs``, ``subset``, ``tracker``); a run that ends well prints one summary block (face.console)."""
    cfg, dataset, summary = plan.cfg, plan.dataset, plan.summary
    # in a log: a line every 30 s while the run lasts
    name = run_name(cfg.task_name, plan.label, plan.llm.model if plan.llm is not None and plan.uses_llm else None)
    with console.alive(cfg.task_name), Tracker(cfg, name, plan.uses_llm) as tracker:
        all_convs, convs = plan.load()
        tracker.log_data(dataset.title, [{"conv_id": c.conv_id, "system": c.system, "split": c.split,
                                          "evaluated_turns": len(c.evaluated_turns())} for c in convs],
                         data_checksums(plan.files),  # by name: a machine's data directory is not part of it
                         "data/raw/" + ",".join(sorted(Path(f).name for f in dataset.files()))[:400])
        check_utterances(convs, plan.settings.checks.max_utterance_chars)
        n_turns = sum(len(c.evaluated_turns()) for c in convs)
        plan.subset = (f"{dataset.title}, {len(convs)} of {len(all_convs)} conversations, {n_turns} assistant turns"
                       + (" (subset)" if dataset.is_subset else "")
                       + (f"; non-default settings: {', '.join(f'{k}={v}' for k, v in plan.label.items())}"
                          if plan.label else ""))
        plan.convs, plan.tracker = convs, tracker
        log.info("%s; results -> %s", plan.subset, plan.out_dir)
        summary.results, summary.run_dir, summary.tracking = (plan.out_dir.resolve(), plan.run_dir.resolve(),
                                                              tracker.enabled)
        summary.run_id, summary.experiment_id = tracker.run_id, getattr(tracker, "experiment_id", None)
        summary.ui = mlflow_ui_command(cfg)
        yield plan
    console.finish(summary)


def mlflow_ui_command(cfg: DictConfig) -> str:
    """How to open the MLflow UI on the run's store: ``make mlflow-ui`` for the project's own ``mlflow.db``."""
    uri = str(OmegaConf.select(cfg, "tracking.tracking_uri", default="") or "")
    own = f"sqlite:///{Path(cfg.paths.root_dir).resolve() / 'mlflow.db'}"
    return "make mlflow-ui" if uri in ("", own) else f"mlflow ui --backend-store-uri {uri} --port 5000"


# ---------------------------------------------------------------- checks before anything runs
def llm_server_files(cfg: DictConfig) -> list[str]:
    """Data files the configured LLM server reads (its class's ``data_files``; the replay judge's released
    judgements), fetched with the experiment's own before anything runs. Its options are checked first: one its class
    does not take is refused, named with the valid ones closest first."""
    target = OmegaConf.select(cfg, "llm.server._target_")
    if not target:
        return []
    server = import_class(target, "llm.server._target_")
    takes = inspect.signature(server).parameters
    unknown = [k for k in cfg.llm.server if k != "_target_" and k not in takes]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in takes.values()):
        raise ConfigError(f"{', '.join('llm.server.' + k for k in unknown)}: not an option of {server.__name__}; its "
                          f"options, closest first: {', '.join(closest_first(unknown, list(takes)))}")
    return list(getattr(server, "data_files", ()))


def check_paths(cfg: DictConfig, out_dir: Path, run_dir: Path, uses_llm: bool, out_key: str) -> None:
    """Output directories (``out_dir`` named by ``out_key``), the LLM cache and the MLflow store, before anything is
    fetched, written or sent."""
    require_writable_dir(out_dir, out_key)
    require_writable_dir(run_dir, "paths.output_dir (hydra.run.dir)")
    require_writable_dir(Path(cfg.paths.data_dir), "paths.data_dir")
    if uses_llm and OmegaConf.select(cfg, "llm.cache", default=False) and OmegaConf.select(cfg, "llm.cache_dir"):
        from face.llm.cache import check_cache_dir

        try:
            check_cache_dir(cfg.llm.cache_dir)
        except ValueError as e:
            raise ConfigError(f"llm.cache_dir: {e}") from None
    if OmegaConf.select(cfg, "tracking.enabled", default=False):
        check_tracking_store(cfg)  # its ValueError: prepare's ConfigError


def check_utterances(convs: Sequence[Conversation], limit: int | None) -> list[str]:
    """Utterances far over a model's context are reported before anything is sent (one line each, the
    first 5): the rule is a plain size limit, ``checks.max_utterance_chars`` (``limit``; None: no check);
    nothing is truncated."""
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
