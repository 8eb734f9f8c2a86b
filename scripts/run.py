"""Entry point for every experiment: ``python scripts/run.py experiment=NAME [overrides]`` (Hydra).

Exit codes: 0 done; 2 a bad setting or input file (one line naming it; nothing sent, no results written);
3 stopped by an LLM budget cap; 4 an LLM request failed after its retries; 130 interrupted (Ctrl-C or
SIGTERM); 1 an unexpected error. Every stop prints one line saying what happened and how to resume;
``FACE_DEBUG=1`` shows the traceback as well. A multirun sweep through a launcher that runs each job in its own
process (``hydra/launcher=submitit_local`` / ``submitit_slurm``) exits 1 when a job failed; that job's own line
is in the output and in ``<sweep dir>/.submitit/<job id>/``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FACE_PROJECT_ROOT", str(ROOT))
sys.path.insert(0, str(ROOT))

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from face.runner import EXIT_CONFIG, fail, run_cli, run_guarded  # noqa: E402

_started = False  # the task function ran (Hydra composed the config)


@hydra.main(version_base="1.3", config_path=str(ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    global _started
    _started = True
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    run_guarded(cfg)


def secret_in_argv(argv: list[str]) -> str | None:
    """The refusal line of an override that carries what looks like a credential (face.secrets: by its name, its
    value or a URL's user-info), checked before Hydra writes .hydra/."""
    from face.secrets import secret_in_overrides

    return secret_in_overrides(argv)


def unique_run_dirs(argv: list[str]) -> list[str]:
    """Each job its own output directory: the configured time stamp plus this process's id (two jobs started
    in the same second never share one). Explicit hydra.run.dir / hydra.sweep.dir overrides win."""
    extra = []
    keys = {a.partition("=")[0].lstrip("+~") for a in argv}
    suffix = f"{os.getpid()}"
    if "hydra.run.dir" not in keys:
        extra.append(f"hydra.run.dir=${{paths.root_dir}}/outputs/${{task_name}}/${{now:%Y-%m-%d_%H-%M-%S}}_{suffix}")
    if "hydra.sweep.dir" not in keys:
        extra.append(f"hydra.sweep.dir=${{paths.root_dir}}/multirun/${{task_name}}/${{now:%Y-%m-%d_%H-%M-%S}}_{suffix}")
    return extra


def precompose(argv: list[str]) -> tuple[str | None, DictConfig | None]:
    """Compose the config once before Hydra's own run (which writes .hydra/ first): a bad override, or a secret
    in any config file, is one line and exit 2 before anything is written. Returns (that line or None, the
    config with its ``hydra`` node; None for a sweep)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from face.secrets import secret_setting

    overrides = [a for a in argv  # Hydra's own settings are Hydra's, except where configs are looked up and runs go
                 if (a.lstrip("+~").startswith(("hydra.searchpath=", "hydra.run.dir="))
                     or not a.lstrip("+~").startswith(("hydra.", "hydra/"))) and a not in ("-m", "--multirun")]
    if any("," in a.partition("=")[2] and "[" not in a and "'" not in a and '"' not in a
           for a in overrides):  # a sweep: Hydra checks each job, after writing its .hydra/: a credential is
        return secret_in_sweep(overrides), None  # looked for here first
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"bad override: {first}", None
    return secret_setting(cfg), cfg  # a credential in a config file, or in a nested value (llm.headers)


def secret_in_sweep(overrides: list[str]) -> str | None:
    """The refusal line of a credential in any config file a sweep would compose: every value of every swept
    setting is composed once (the other swept settings at their first value), so each config group option the
    sweep selects is checked. A sweep Hydra must expand itself (glob) or that does not compose is left to it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from face.secrets import secret_setting

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                   else [o.input_line] for o in parsed]
    except Exception:
        return None
    firsts = [c[0] for c in choices]
    jobs = [[*firsts[:i], v, *firsts[i + 1:]] for i, c in enumerate(choices) for v in c[1:]] + [firsts]
    for job in jobs[:100]:
        try:
            with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
                bad = secret_setting(compose(config_name="config", overrides=job))
        except Exception:
            continue
        if bad:
            return bad
    return None


# what a run may write into its run directory (an input file there with one of these names would be replaced)
RUN_OUTPUTS = (".hydra/", "results/", "run_file.json", "particles.jsonl", "particle_scores.jsonl",
               "cost_estimate.csv", "llm_usage.json", "conversations.json", "report.html", "report_tables/")


def own_run_dir(argv: list[str], cfg: DictConfig, owned: contextlib.ExitStack) -> str | None:
    """An explicit ``hydra.run.dir`` (every other run gets a new directory of its own): checked like any output
    path, locked for the whole run (held in ``owned``), and refused when it holds another run's outputs -- the same
    settings and input resume it (said on the console). Returns the line of a refusal, or None."""
    from face.errors import ConfigError, require_writable_dir
    from face.experiments.common import run_owner
    from face.files import MARKER, claim_state, dir_lock, refuse_input_overwrite

    if "hydra.run.dir" not in {a.partition("=")[0].lstrip("+~") for a in argv} or {"-m", "--multirun"} & set(argv):
        return None
    try:
        value = str(OmegaConf.select(cfg, "hydra.run.dir") or "")
        data = OmegaConf.select(cfg, "dataset.path", default=None, throw_on_missing=False)
        if value.strip():
            refuse_input_overwrite(Path(value), [data] if isinstance(data, str) and os.path.isfile(data) else [],
                                   RUN_OUTPUTS, "hydra.run.dir")
        require_writable_dir(value, "hydra.run.dir")
        run_dir = Path(value).resolve()
        owned.enter_context(dir_lock(run_dir, "hydra.run.dir"))
        # Hydra's own files (.hydra/, the log) alone are not results: a run refused for a bad setting leaves them
        results = [p.name for p in run_dir.iterdir() if p.name not in (".hydra", MARKER) and p.suffix != ".log"]
        state = claim_state(run_dir, run_owner(cfg), "hydra.run.dir", outputs=results,
                            how="remove it first (or rerun it with its own settings to resume it)")
    except ConfigError as e:
        return str(e)
    except Exception as e:  # an interpolation that cannot be resolved, ...
        return f"hydra.run.dir: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
    if state == "resume":
        print(f"Resuming the run in {run_dir} (same settings and input).", flush=True)
    return None


def cli() -> None:
    argv = sys.argv[1:]
    bad = secret_in_argv(argv)  # with --cfg too: it would print the key
    if bad:
        fail(EXIT_CONFIG, f"error: {bad}")
    with contextlib.ExitStack() as owned:  # an explicit hydra.run.dir stays locked until the run ends
        if not any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):  # not --help, --cfg, ...
            bad, cfg = precompose(argv)
            if not bad and cfg is not None:
                bad = own_run_dir(argv, cfg, owned)
            if bad:
                fail(EXIT_CONFIG, f"error: {bad}")
            sys.argv = [sys.argv[0], *argv, *unique_run_dirs(argv)]
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops cleanly, like Ctrl-C
        try:
            main()
        except SystemExit as e:
            if e.code == 1 and not _started and not launched_job_failed(e):  # Hydra could not compose the config
                sys.exit(EXIT_CONFIG)
            raise


def launched_job_failed(e: SystemExit) -> bool:
    """Hydra exits 1 after a launcher that runs each job in its own process (hydra/launcher=submitit_local,
    submitit_slurm) reported a job that failed there: that job ran (its error is in the output), so the sweep
    is not a bad override (exit 1, not 2). Hydra calls sys.exit while handling the launcher's exception."""
    cause = e.__context__
    return cause is not None and type(cause).__module__.split(".")[0] == "submitit"


if __name__ == "__main__":
    run_cli(cli)
