"""What a run is called and which runs are the same: the settings that differ from an experiment's default
configuration (captions, the MLflow run name; they send the outputs to the run directory), and the owner of a run
directory (``.face-run.json``: the same settings and input resume, anything else is another run)."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf

from face.files import digest_files, digest_settings

log = logging.getLogger(__name__)


# settings that say where things go or how they are shown, not what is computed
_NOT_SETTINGS = ("paths.", "tracking.", "hydra.", "report.", "dataset.download", "llm.progress", "llm.cache_dir",
                 "checks.")


def non_default_settings(cfg: DictConfig) -> dict[str, str]:
    """Every setting that differs from the experiment's default configuration (``experiment=<task_name>``), as
    ``key -> value``: they go into captions and the MLflow run name, and send the outputs to the run directory.
    A config group swapped for another of its configs counts as one setting (``llm=openai``); the keys of the
    new config are then compared with that config's own defaults. An experiment that cannot be composed on its
    own (e.g. from a searchpath) counts as all-default."""
    from face.tracking import flatten

    groups = (("dataset", "dataset.name"), ("method", "method.name"), ("llm", "llm.backend"))
    try:
        default = _default_config([f"experiment={cfg.task_name}"])
    except Exception:
        log.warning("could not compose the default configuration of %r: every setting counts as default",
                    cfg.task_name)
        return {}
    swaps = {g: str(OmegaConf.select(cfg, key)) for g, key in groups
             if OmegaConf.select(cfg, key, default=None) != flatten(default).get(key)}
    if swaps:
        try:
            default = _default_config([f"experiment={cfg.task_name}", *(f"{g}={v}" for g, v in swaps.items())])
        except Exception:  # a config name that is not a file of its group: compare key by key
            swaps = {}
    mine = flatten(cast(dict, OmegaConf.to_container(cfg, resolve=False)))
    base = flatten(default)
    out = dict(swaps)
    for k in sorted(set(mine) | set(base)):
        if k.startswith(_NOT_SETTINGS) or mine.get(k, "<absent>") == base.get(k, "<absent>"):
            continue
        if k not in base:
            print(f"warning: setting {k} is not part of experiment {cfg.task_name}'s configuration; no code reads it",
                  file=sys.stderr, flush=True)
        v = mine.get(k, "<absent>")
        out[k] = Path(v).name if isinstance(v, str) and os.path.isabs(v) else str(v)
    return out


_DEFAULTS: dict[tuple, dict] = {}  # composed default configurations, by search path, its files' state and overrides


def _default_config(overrides: list[str]) -> dict:
    """The configuration ``overrides`` compose to (unresolved, as a plain dict), in the config search path of the
    Hydra app running, else the project's ``conf/``. Composed once per process for the same search path, the same
    state of its files (every file's size and modification time) and the same overrides: a composition reads and
    merges ~40 YAML files (0.3-0.5 s), and every run composes its experiment's default one or two times."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    hydra = GlobalHydra.instance()
    # inside scripts/run.py's Hydra app, or the runner's session: its search path
    if hydra.is_initialized() and hydra.hydra is not None:
        dirs = [s.path for s in hydra.hydra.config_loader.get_sources() if s.scheme() == "file"]
    else:
        dirs = [str(Path(__file__).resolve().parents[1] / "conf")]
    files = sorted(str(f) for d in dirs for f in Path(d).rglob("*") if f.is_file())
    state = tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files)  # (path, size, mtime) of each file
    key = (tuple(dirs), state, tuple(overrides))
    if key not in _DEFAULTS:
        with nullcontext() if hydra.is_initialized() else initialize_config_dir(config_dir=dirs[0], version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        _DEFAULTS[key] = OmegaConf.to_container(cfg, resolve=False)  # type: ignore[assignment]
    return _DEFAULTS[key]


def run_owner(cfg: DictConfig) -> dict[str, str]:
    """What makes two runs the same run (the ownership marker ``.face-run.json`` of a run directory): a digest of
    the settings that decide the results (not where things go, nor how they are shown) and of the input file
    (``dataset.path``, by its bytes: the same file moved elsewhere is the same input)."""
    from face.tracking import flatten

    flat = flatten(cast(dict, OmegaConf.to_container(cfg, resolve=False)))
    settings = {k: v for k, v in flat.items()
                if not k.startswith(_NOT_SETTINGS) and k not in ("dataset.path", "llm.dry_run")}
    path = OmegaConf.select(cfg, "dataset.path", default=None, throw_on_missing=False)
    owner = {"settings": digest_settings(settings)}
    if isinstance(path, str) and os.path.isfile(path):
        owner["input"] = digest_files([path])
    return owner


def run_name(task: str, settings: dict[str, str], judge: str | None = None) -> str:
    """What differs from the experiment's default first, then the experiment (the page the run is on says it too):
    ``particle_agg=median · reproduce_table2``, the last part of each key where that is unambiguous; the
    experiment alone when nothing differs. A run on its own input file (``dataset.path``: ``face evaluate``'s) leads
    with the file's stem and the ``judge`` model, then what else differs: ``v1 · gpt-4o-mini · aspects=[…]``."""
    from face.tracking.sweeps import SEP, tails

    path = settings.get("dataset.path")
    if path:
        settings = {k: v for k, v in settings.items() if k not in ("dataset.path", "llm")}
    label = " ".join(f"{n}={v}" for n, v in zip(tails(list(settings)), settings.values()))
    if path:
        return SEP.join(x for x in (Path(path).stem, judge, label) if x)[:250]
    return (f"{label}{SEP}{task}" if label else task)[:250]
