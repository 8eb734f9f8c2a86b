"""The configuration of a run that is no Hydra job (``face.api``, ``face evaluate``), composed with Hydra's compose API:
the config group choices and the command line's ``--set`` as overrides, every other setting merged as a dict (taken
literally: a string is never an interpolation). A bad one is one line naming it (a misspelled config name lists the
valid ones, closest first). A credential in any of them is refused by the runner's check (``face.runner.run.check``),
before anything is written or sent."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from face.errors import ConfigError, closest_first
from face.settings import CONF

ROOT = Path(__file__).resolve().parents[2]  # a checkout's root (installed from a wheel: site-packages)
NOT_CHOICES = {"llm": {"base"}}  # configs of a group that only others extend (llm/base.yaml: the shared defaults)


@contextlib.contextmanager
def composed(overrides: Sequence[str] = (), settings: Mapping[str, Any] | None = None) -> Iterator[DictConfig]:
    """The task's configuration of ``overrides``, then ``settings`` (dotted key -> value; ``+key`` / ``++key`` may add
    a key, ``~key`` removes one). The block runs in the Hydra session it was composed in: the experiment composes its
    default configuration there (captions name the settings that differ)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import MissingConfigException

    if (ROOT / "conf").is_dir():  # a checkout; installed from a wheel: the working directory (conf/paths)
        os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))  # paths.root_dir: the cache, data and mlflow.db
    if GlobalHydra.instance().is_initialized():
        raise ConfigError("a FACE run cannot start inside a Hydra application (Hydra is already initialized); "
                          "call the experiment's runner instead")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="run"):
        try:
            cfg = compose("config", list(overrides))
        except MissingConfigException as e:
            raise ConfigError(missing_config(e)) from None
        except Exception as e:
            raise ConfigError(f"bad setting: {first_line(e)}") from None
        for name, value in (settings or {}).items():
            _set(cfg, name, value)
        yield cfg


def _set(cfg: DictConfig, name: str, value: Any) -> None:
    """One setting, taken literally, in the composed configuration."""
    from omegaconf.errors import OmegaConfBaseException

    from face.methods import escape_interpolation

    key = name.lstrip("+~")
    parent, _, leaf = key.rpartition(".")
    try:
        if name.startswith("~"):
            with open_dict(cfg):
                del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
        else:
            OmegaConf.update(cfg, key, _literal(value, escape_interpolation), merge=True,
                             force_add=name.startswith("+"))
    except (OmegaConfBaseException, KeyError, TypeError) as e:
        raise ConfigError(f"setting {key}: {first_line(e)}") from None


def _literal(value: Any, escape) -> Any:
    """``value`` as a configuration value: a string's ``${`` escaped (never an interpolation, e.g. one that would read
    an API key from the environment), a path as a string, a numpy scalar as a Python one."""
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, (str, os.PathLike)):
        return escape(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return [_literal(v, escape) for v in value]
    if isinstance(value, Mapping):
        return {k: _literal(v, escape) for k, v in value.items()}
    if value is not None and not isinstance(value, (bool, int, float)):
        raise TypeError(f"a {type(value).__name__} cannot be a setting (use a string, number, bool, None, list or "
                        "dict)")
    return value


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def missing_config(e) -> str:
    """The line of a config group option that does not exist: the valid ones, closest first."""
    group, _, name = str(e.missing_cfg_file or "").rpartition("/")
    options = [o for o in (e.options or []) if o not in NOT_CHOICES.get(group, set())]
    if not group or not options:
        return f"bad setting: {first_line(e)}"
    return (f"{group}={name}: no such {group.rsplit('/', 1)[-1]} (conf/{group}/{name}.yaml); valid, closest first: "
            + ", ".join(closest_first(name, options)))


def job_dir(cfg: DictConfig) -> Path:
    """A Hydra job's directory (``hydra.run.dir``), resolved once and fixed in ``cfg`` (its ``${now:...}`` read at
    one instant); Hydra's runtime config is set to it, so ``paths.output_dir`` (``${hydra:runtime.output_dir}``)
    resolves as it will in the job."""
    from hydra.core.hydra_config import HydraConfig

    value = str(select(cfg, "hydra.run.dir") or "")
    if not value.strip():
        raise ConfigError("hydra.run.dir: the path is empty")
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.run.dir = value
        cfg.hydra.runtime.output_dir = os.path.abspath(value)
    HydraConfig.instance().set_config(cfg)
    return Path(os.path.abspath(value))


def task_config(cfg: DictConfig) -> DictConfig:
    """The configuration an experiment reads: without Hydra's own node (as Hydra hands it to a job)."""
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        task.pop("hydra", None)
    return task


def select(cfg: DictConfig, key: str):
    """A setting's value, resolved; ConfigError naming it when it cannot be resolved."""
    try:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    except Exception as e:
        raise ConfigError(f"{key}: {first_line(e)}") from None
