"""``scripts/run.py``'s checks before Hydra writes anything: a Hydra callback (``conf/config.yaml``,
``hydra.callbacks.checks``, first of them). A run is checked as the runner checks it (``face.runner.run.check``: every
setting, the credentials, the input, the output directories) and its directory locked before Hydra writes into it;
the job checks it again as it claims it. A sweep (``-m``) is checked before its directory or MLflow parent run
exists: a credential in any configuration it would compose, or a bad override (each swept value composed once, the
other swept settings at their first value: every config group option the sweep selects is checked), and its first
job's input (data that cannot be fetched offline); each job then checks its own settings (the other jobs still
run)."""

from __future__ import annotations

import contextlib

from hydra.experimental.callback import Callback
from omegaconf import open_dict

from face.files import dir_lock
from face.runner.compose import job_dir, task_config
from face.runner.exits import guarded
from face.runner.run import RunRequest, check, experiment_parts, refuse_credentials
from face.settings import CONF


class Checks(Callback):
    def __init__(self) -> None:
        self.held = contextlib.ExitStack()  # the run's directory, locked until the run ends (or the process does)

    def on_run_start(self, config, **kwargs) -> None:
        with guarded():
            own = job_dir(config)
            check(task_config(config), RunRequest(job_dir=own))
            self.held.enter_context(dir_lock(own, "hydra.run.dir"))  # before Hydra writes into it

    def on_run_end(self, config, **kwargs) -> None:
        self.held.close()

    def on_multirun_start(self, config, **kwargs) -> None:
        with guarded():
            searchpath = [o for o in config.hydra.overrides.hydra if o.lstrip("+").startswith("hydra.searchpath=")]
            sweep_problem([*config.hydra.overrides.task, *searchpath])


def sweep_problem(overrides: list[str]) -> None:
    """ConfigError: a credential in any config file the sweep would compose, a job that does not compose, or a first
    job whose input cannot be loaded. A sweep Hydra must expand itself (glob) is left to it."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from face.experiments.common import prepare

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                   else [str(o.input_line)] for o in parsed]
    except Exception:
        return
    firsts = [c[0] for c in choices]
    jobs = [firsts] + [[*firsts[:i], v, *firsts[i + 1:]] for i, c in enumerate(choices) for v in c[1:]]
    configs = [compose(config_name="config", overrides=job) for job in jobs[:100]]  # a bad override: raised
    for config in configs:
        refuse_credentials(config)
    with open_dict(configs[0]):
        configs[0].paths.output_dir = str(CONF.parent / "multirun")  # checked only: nothing is created
    try:
        plan = prepare(configs[0], experiment_parts(configs[0]))
    except ValueError:  # ConfigError, DataError: the job's own line, in its own directory
        return
    plan.load()  # DataError: the input cannot be loaded (fetched) for any job
