"""The configuration of a run, composed once from its overrides: a bad override is one line naming it (a misspelled
config name lists the valid ones, closest first); a credential in any setting is refused."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from face.errors import ConfigError, closest_first
from face.secrets import secret_in_overrides, secret_setting

CONF = Path(__file__).resolve().parents[1] / "conf"  # the project's conf/: face/conf links to it, a wheel copies it
NOT_CHOICES = {"llm": {"base"}}  # configs of a group that only others extend (llm/base.yaml: the shared defaults)


@contextlib.contextmanager
def hydra_session() -> Iterator:
    """Hydra initialized on the project's configuration for the block (its Hydra object): the run composes there,
    and the experiment composes its default configuration there (captions name the settings that differ)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        raise ConfigError("a FACE run cannot start inside a Hydra application (Hydra is already initialized); "
                          "call the experiment's runner instead")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="run"):
        yield GlobalHydra.instance().hydra


def compose(hydra, overrides: Sequence[str], job: bool) -> DictConfig:
    """The configuration with its ``hydra`` node (``job``: as ``scripts/run.py`` composes it, logging configured).
    A credential among the overrides is refused before anything is composed, one in a config file after."""
    from hydra.errors import MissingConfigException
    from hydra.types import RunMode

    bad = secret_in_overrides(overrides)
    if bad:
        raise ConfigError(bad)
    try:
        cfg = hydra.compose_config("config", list(overrides), run_mode=RunMode.RUN, from_shell=job,
                                   with_log_configuration=job)
    except MissingConfigException as e:
        raise ConfigError(missing_config(e)) from None
    except Exception as e:
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"bad setting: {line}") from None
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        if cfg.hydra.mode is None:
            cfg.hydra.mode = RunMode.RUN
    bad = secret_setting(cfg)  # a credential in a config file (conf/llm/NAME.yaml) or a nested value (llm.headers)
    if bad:
        raise ConfigError(bad)
    return cfg


def missing_config(e) -> str:
    """The line of a config group option that does not exist: the valid ones, closest first."""
    missing = str(e.missing_cfg_file or "")
    group, _, name = missing.rpartition("/")
    options = [o for o in (e.options or []) if o not in NOT_CHOICES.get(group, set())]
    if not group or not options:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"bad setting: {first}"
    return (f"{group}={name}: no such {group.rsplit('/', 1)[-1]} (conf/{group}/{name}.yaml); valid, closest first: "
            + ", ".join(closest_first(name, options)))


def job_dir(cfg: DictConfig) -> Path:
    """A Hydra job's directory (``hydra.run.dir``), resolved once and fixed in ``cfg`` (its ``${now:...}`` read at
    one instant); Hydra's runtime config is set to it, so ``paths.output_dir`` (``${hydra:runtime.output_dir}``)
    resolves as it will in the job."""
    from hydra.core.hydra_config import HydraConfig

    try:
        value = str(OmegaConf.select(cfg, "hydra.run.dir", throw_on_missing=True) or "")
    except Exception as e:
        raise ConfigError(f"hydra.run.dir: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from None
    if not value.strip():
        raise ConfigError("hydra.run.dir: the path is empty")
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.run.dir = value
        cfg.hydra.runtime.output_dir = os.path.abspath(value)
    HydraConfig.instance().set_config(cfg)
    return Path(os.path.abspath(value))


def task_config(cfg: DictConfig) -> DictConfig:
    """The configuration an experiment reads: without Hydra's own node (as Hydra hands it to a job)."""
    if "hydra" not in cfg:
        return cfg
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def dry(cfg: DictConfig) -> DictConfig:
    """The configuration of the estimate: the same run, sending nothing and tracking nothing."""
    merged = OmegaConf.merge(cfg, {"llm": {"dry_run": True}, "tracking": {"enabled": False}})
    assert isinstance(merged, DictConfig)
    return merged


def select(cfg: DictConfig, key: str, setting: str | None = None):
    """A setting's value, resolved; ConfigError naming it when it cannot be resolved."""
    try:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    except Exception as e:
        raise ConfigError(f"{setting or key}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from None


__all__ = ["CONF", "compose", "dry", "hydra_session", "job_dir", "missing_config", "select", "task_config"]
