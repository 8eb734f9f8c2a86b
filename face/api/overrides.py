"""The API's arguments and settings as the configuration of one run: a config group by its config's name (a choice
Hydra composes), any other key by its dotted name or as a nested dict (merged into the composed configuration, taken
literally: ``face.runner.compose``). The settings the API sets from its own arguments (the input, ``out``,
``aspects``, ``limit``) and Hydra's own (``hydra.*``) are refused in every spelling (``key``, ``+key``, ``++key``,
``~key``, ``hydra/group``), naming the argument to use."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from face.api.inputs import Source
from face.errors import ConfigError
from face.settings import CONF

# settings the API sets from its own arguments -> what to use instead ({...}: the entry point's names, ARGUMENTS)
OWN = {"experiment": "{who} runs FACE on your conversations; the paper's experiments run with scripts/run.py "
                     "experiment=NAME",
       "dataset": "the conversations are {input}", "dataset.path": "the conversations are {input}",
       "dataset.limit": "use {limit}", "aspects": "use {aspects}", "paths.output_dir": "use {out}",
       "report.out_dir": "use {out}", "llm.dry_run": "use {estimate} (it sends nothing)", "task_name": "set by {who}",
       "runner": "set by {who}", "hydra": "{who} runs no Hydra job: its files go to {out}"}
ARGUMENTS = {"api": {"who": "face.evaluate", "input": "the first argument", "limit": "limit=", "aspects": "aspects=",
                     "out": "out=", "estimate": "face.estimate"},
             "cli": {"who": "face evaluate", "input": "LOGS", "limit": "--limit", "aspects": "--aspects",
                     "out": "--out", "estimate": "--dry-run"}}


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


def refuse_own(name: str, entry: str = "api") -> None:
    """ConfigError for a setting the API sets itself or Hydra's own, in any spelling (``+``, ``++``, ``~``,
    ``hydra/group``), naming the argument of the entry point (``api`` / ``cli``) to use. The command line keeps
    ``hydra.searchpath`` (where configs are looked up, as for scripts/run.py)."""
    key = name.strip().lstrip("+~").strip()
    root = re.split(r"[./]", key, maxsplit=1)[0]
    if entry == "cli" and key == "hydra.searchpath":  # where configs are looked up (your own: docs/extending.md)
        return
    if key in OWN or root in ("hydra", "task_name", "runner"):
        raise ConfigError(f"setting {name}: " + (OWN.get(key) or OWN[root]).format(**ARGUMENTS[entry]))


def split_settings(settings: Mapping[str, Any], overrides: Sequence[str] = (),
                   entry: str = "api") -> tuple[list[str], dict[str, Any]]:
    """Keyword settings and the command line's ``--set KEY=VALUE`` overrides as (overrides Hydra composes: config
    group choices and ``--set``, every other key): a config group by its config's name (``run_size="tiny"``), any
    other key by its dotted name, a nested dict flattened (``method={"scoring": {"n": 3}}`` is ``method.scoring.n``).
    A setting the API sets itself is refused, naming the argument to use.

    Hydra's compose API takes a config group choice only as an override string (``compose(overrides=[...])``: a
    dict merged after composing cannot select a group's file), so a choice is written ``group=name`` here."""
    groups = {p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra"}
    choices, keys = [], {}
    for name, value in _flatten(settings).items():
        refuse_own(name)
        if name not in groups:
            keys[name] = value
        elif not isinstance(value, str) or not re.fullmatch(r"[\w.-]+", value):
            raise ConfigError(f"setting {name}: name one of the configs in conf/{name}/, got {value!r}")
        else:
            choices.append(f"{name}={value}")
    for o in overrides:
        if not isinstance(o, str) or ("=" not in o and not o.lstrip().startswith("~")):
            raise ConfigError(f"--set {o!r}: give KEY=VALUE")
        refuse_own(o.partition("=")[0], entry)
    return [*choices, *overrides], keys


def conversations(value: Any, name: str) -> int:
    """``value`` if it is a positive number of conversations, else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive number of conversations, got {value!r}")
    return value


def check_arguments(aspects: Any, llm: Any, out: Any, limit: Any, entry: str = "api", **flags: Any) -> list[str] | None:
    """The API's own arguments, typed: ConfigError naming the one that is not (as the entry point ``api`` / ``cli``
    names it); the aspects as a list (None: the dataset's)."""
    dash = "--" if entry == "cli" else ""
    if not isinstance(llm, str) or not re.fullmatch(r"[\w.-]+", llm):
        raise ConfigError(f"llm must name a config in conf/llm/ (local, openai, openai_compatible, scripted, replay, "
                          f"...), got {llm!r}; its settings go in as **{{'llm.base_url': ...}}")
    if limit is not None:
        conversations(limit, f"{dash}limit")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out must be a directory path (a string or a Path) or None, got {type(out).__name__}")
    if out is not None and not str(os.fspath(out)).strip():
        raise ConfigError(f"{dash}out: the path is empty")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be True or False, got {value!r}")
    if aspects is None:
        return None
    names = [aspects] if isinstance(aspects, str) else aspects
    if not isinstance(names, Sequence) or isinstance(names, bytes) or not all(isinstance(a, str) for a in names):
        raise ConfigError(f"aspects must be an aspect name or a list of them (e.g. ['relevance', "
                          f"'dialogue_overall']) or None, got {aspects!r:.80}")
    return list(names)


def run_settings(source: Source, aspects: list[str] | None, llm: str, target: Path, limit: int | None,
                 mlflow: bool, choices: Sequence[str], keys: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """FACE on ``source`` into ``target``, with the caller's ``split_settings``: the overrides and the settings of the
    configuration ``face.runner.compose.composed`` composes."""
    own: dict[str, Any] = {"paths.output_dir": str(target), "report.out_dir": str(target),
                           **({"dataset.path": str(source.path)} if source.dataset is None else {}),
                           **({"dataset.limit": limit} if limit else {}),
                           **({"aspects": aspects} if aspects is not None else {})}
    return ["experiment=evaluate", f"dataset={source.dataset or 'chat_logs'}", f"llm={llm}",
            *([] if mlflow else ["tracking=none"]), *choices], {**own, **keys}
