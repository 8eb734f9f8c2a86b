"""The skeleton every experiment shares: validate and build (dataset, methods, aspects, output paths)
before anything is fetched, written or sent; then fetch + load the data, open tracking, and hand the
experiment a ``Context`` with the few calls it needs (predict, evaluate, published, save_run).

Only an experiment's full-data run writes to ``results/<task_name>``; a subset (``dataset.limit``,
``systems``, ``splits``, ``file``) writes to ``<run dir>/results`` so committed results are never
overwritten by it (``report.out_dir`` overrides both).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from face.aspects import Aspect
from face.data import ensure_data
from face.data.fetch import data_checksums
from face.data.schema import Conversation
from face.metaeval import LEVELS, meta_evaluate
from face.methods import Inputs, Method, MethodOutput, build
from face.runfile import write_run_file
from face.tracking import Tracker

log = logging.getLogger(__name__)


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

    @property
    def method(self) -> Method:
        return next(iter(self.methods.values()))

    def inputs(self) -> Inputs:
        llm = OmegaConf.to_container(self.cfg.llm, resolve=True) if "llm" in self.cfg else {}
        return Inputs(self.dataset, self.convs, self.aspects, self.data_dir, self.run_dir, llm, self.tracker)

    def predict(self, method: Method | None = None) -> MethodOutput:
        return (method or self.method).predict(self.inputs())

    def evaluate(self, preds, levels: Sequence[str] = LEVELS, n_boot: int | None = None,
                 splits: Sequence[str] | None = None) -> pd.DataFrame:
        m = self.cfg.metaeval
        return meta_evaluate(preds, self.convs, self.aspects, list(splits or self.splits), levels,
                             m.n_boot if n_boot is None else n_boot, self.cfg.seed, m.confidence)

    def published(self) -> pd.DataFrame:
        return self.dataset.published(self.data_dir)

    def save_run(self, preds, name: str = "run_file.json") -> Path:
        path = write_run_file(preds, self.run_dir / name)
        self.tracker.log_artifacts([path], "run")
        return path


def released_scores(ctx: Context, why: str) -> pd.DataFrame:
    """The released per-particle scores, for the experiments that re-aggregate them (method face_released)."""
    from face.methods.released import FaceReleased

    if not isinstance(ctx.method, FaceReleased):
        raise ValueError(f"{ctx.cfg.task_name} {why}: use method=face_released")
    return ctx.method.load(ctx.inputs())


def out_dir_for(cfg: DictConfig, dataset) -> Path:
    if cfg.report.get("out_dir"):
        return Path(cfg.report.out_dir)
    if dataset.is_subset:
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
    """Validate, fetch, load, track. ``method_cfgs``: several methods (name -> config) instead of ``cfg.method``."""
    dataset = build(cfg.dataset)
    methods = {name: build(node) for name, node in (method_cfgs or {cfg.method.name: cfg.method}).items()}
    aspects = dataset.resolve_aspects(cfg.get("aspects"))
    files = list(dict.fromkeys([*dataset.files(), *[f for m in methods.values()
                                                    for f in m.required_files(dataset, aspects)], *extra_files]))
    splits = _splits(cfg, dataset)
    out_dir, run_dir = out_dir_for(cfg, dataset), Path(cfg.paths.output_dir)
    data_dir = Path(cfg.paths.data_dir)
    with Tracker(cfg) as tracker:
        tracker.log_config()
        ensure_data(data_dir, files, cfg.paths.get("data_mirror"), dataset.download)
        tracker.set_tags({f"data_sha256.{k}": v for k, v in data_checksums(files).items()})
        all_convs = dataset.load_all(data_dir)
        convs = dataset.select(all_convs)
        if not convs:
            raise ValueError(f"the dataset selection (limit={dataset.limit}, systems={dataset.systems}, "
                             f"splits={dataset.splits}) matches no conversation of {dataset.title}")
        n_turns = sum(len(c.evaluated_turns()) for c in convs)
        subset = (f"{dataset.title}, {len(convs)} of {len(all_convs)} conversations, {n_turns} assistant turns"
                  + (" (subset)" if dataset.is_subset else ""))
        has_labels = any(c.labels or any(t.labels for t in c.turns) for c in convs)
        log.info("%s; results -> %s", subset, out_dir)
        yield Context(cfg, dataset, methods, convs, aspects, splits, data_dir, out_dir, run_dir, subset, tracker,
                      has_labels)
