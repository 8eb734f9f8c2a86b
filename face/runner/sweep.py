"""``scripts/run.py -m``: Hydra composes and checks each job after writing its ``.hydra/`` record, so a credential in
any configuration the sweep would compose, or a bad override, is looked for first (each swept value composed once,
the other swept settings at their first value: every config group option the sweep selects is checked), and the
first job's settings and input are checked as the runner checks them (data that cannot be fetched offline stops the
sweep before its directory or MLflow parent run exists); each job then goes through the runner (``run_guarded``)."""

from __future__ import annotations

from collections.abc import Sequence

from face.runner.compose import CONF


def sweep_problem(overrides: Sequence[str]) -> str | None:
    """The refusal line of a sweep before Hydra starts it: a credential in any config file it would compose, or a
    first job that does not compose (a bad override; a misspelled config name lists the valid ones). A sweep Hydra
    must expand itself (glob) is left to it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import MissingConfigException

    from face.runner.compose import missing_config
    from face.secrets import secret_in_overrides, secret_setting

    bad = secret_in_overrides(overrides)
    if bad:
        return bad
    mine = [a for a in overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/")) or
            a.lstrip("+~").startswith("hydra.searchpath=")]
    try:
        parsed = OverridesParser.create().parse_overrides(mine)
        choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                   else [str(o.input_line)] for o in parsed]
    except Exception:
        return None
    firsts = [c[0] for c in choices]
    jobs = [firsts] + [[*firsts[:i], v, *firsts[i + 1:]] for i, c in enumerate(choices) for v in c[1:]]
    for k, job in enumerate([*jobs[:100], firsts]):  # every job's credentials, then the first job's input
        try:
            with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
                cfg = compose(config_name="config", overrides=job)
                bad = secret_setting(cfg) if k < len(jobs[:100]) else _input_problem(cfg)
        except MissingConfigException as e:
            bad = missing_config(e)
        except Exception as e:
            if k:
                continue
            bad = f"bad setting: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        if bad:
            return bad
    return None


def _input_problem(cfg) -> str | None:
    """The first job's input, fetched and loaded as the runner does before it claims a run's directory (``Plan.load``):
    the line of a DataError, or None. A job's own bad setting is left to the job (the other jobs still run)."""
    from omegaconf import open_dict

    from face.errors import DataError
    from face.experiments.common import prepare
    from face.runner.run import experiment_parts

    with open_dict(cfg):
        cfg.paths.output_dir = str(CONF.parent / "multirun")  # checked only: nothing is created before the sweep
    try:
        plan = prepare(cfg, experiment_parts(cfg))
    except ValueError:  # ConfigError, DataError: the job's own line
        return None
    try:
        plan.load()
    except DataError as e:
        return str(e)
    return None


__all__ = ["sweep_problem"]
