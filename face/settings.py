"""Typed settings: how every settings class is declared, and how a bad value is refused.

    from pydantic import Field
    from face.settings import Number, settings

    @settings("llm", conf="llm/base.yaml")       # the dotted prefix its errors name; the YAML holding its defaults
    class LLMConfig:
        timeout_s: Number = Field(gt=0)           # constraints: Field(ge=, gt=, le=, lt=, min_length=)
        http_client: Literal["aiohttp", "httpx"]  # choices: Literal
        cache_dir: str | None                     # null allowed: `| None`
        usage_file: str | None = None             # a key conf/ does not hold: its default here

Each default stands once: a key of the class's conf file has no default in the class (tests/test_settings.py holds
it); built in code, the class takes the file's value of each key it is not given, resolved as a run composes it with
conf/config.yaml's default choices (``conf_defaults``). A Hydra run passes every key.

A class so declared is a pydantic dataclass, strict (a bool is not a number, ``"false"`` is not a bool, ``"3"`` is
not an integer, an integer is not a bool), with no key beside its fields and no NaN or infinity in a number. Its
constructor raises ``ConfigError`` with one line naming the dotted key and the value:
``llm.timeout_s must be a finite number > 0, got nan``. A rule over several fields is a
``@model_validator(mode="after")`` that raises ``ValueError`` with the whole sentence (keys named in full); a rule on
one field is a ``@field_validator`` whose ``ValueError`` text follows the key (``must be ...``). ``Number`` keeps an
integer an integer (``temperature=0`` stays 0: a request's parameters enter its cache key as written). A settings
class nested in another is declared ``Annotated[Inner, nested(Inner)]``: a mapping is built into it (given in code,
its keys overlay the file's), and its errors name the key where it stands (one ``Draws`` type serves
``method.scoring.draws``, ``method.particles.draws`` and ``method.draws``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Literal, TypeVar, Union, dataclass_transform, get_args, get_origin

import pydantic.dataclasses
from omegaconf import DictConfig, OmegaConf
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError

from face.errors import ConfigError
from face.secrets import redact

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
Number = int | float  # a real number as written (an int stays an int); never a bool, NaN or infinity

T = TypeVar("T")


CONF = Path(__file__).resolve().parent / "conf"  # face/conf links to the project's conf/ (a wheel copies it)


@dataclass_transform(field_specifiers=(dataclasses.field, Field), kw_only_default=True)
def settings(prefix: str, *, frozen: bool = False, conf: str | None = None) -> Callable[[type[T]], type[T]]:
    """The class as a strict pydantic dataclass whose constructor raises one-line ``ConfigError``s naming
    ``prefix.<key>`` (``prefix`` empty: a top-level key). ``conf``: the YAML under conf/ that holds its defaults
    (``file.yaml:node`` for a node of it); a key left out is that file's value, as a run composes it by default."""

    def make(cls: type[T]) -> type[T]:
        built: Any = pydantic.dataclasses.dataclass(cls, config=STRICT, frozen=frozen, kw_only=True)
        init = built.__init__
        names = [f.name for f in dataclasses.fields(built)]
        inner = {n for n in names if _settings_class(built.__pydantic_fields__[n].annotation) is not None}

        def checked(self: Any, *args: Any, **kwargs: Any) -> None:
            given = {**dict(zip(names, args)), **kwargs}
            partial = [k for k in inner if isinstance(given.get(k), Mapping)]  # a nested mapping: its keys overlay
            if conf is not None and (partial or not set(names) <= set(given)):
                default = conf_defaults(conf, names)
                given = {**default, **given, **{k: {**default.get(k, {}), **given[k]} for k in partial}}
            init(self, **given)

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                checked(self, *args, **kwargs)
            except ValidationError as e:
                raise ConfigError(error_line(e, built, prefix)) from None

        built.__init__ = __init__
        built.__settings_conf__ = conf
        built.__checked_init__ = checked  # pydantic's errors: a nested class's come with the outer key's path
        return built

    return make


def conf_defaults(conf: str, names: Sequence[str]) -> dict[str, Any]:
    """The values conf/<file> gives the keys ``names`` (``???``, no value, left out), resolved as in a run composed
    with conf/config.yaml's default choices; the file's ``defaults`` of its own group are merged under it."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("FACE_")))  # paths read these
    return copy.deepcopy(_resolved(conf, tuple(names), env))


@functools.lru_cache(maxsize=64)
def _resolved(conf: str, names: tuple[str, ...], env: tuple) -> dict[str, Any]:
    file, _, node = conf.partition(":")
    group = str(Path(file).parent).strip(".")
    root = _root().copy()
    if group:
        root[group] = _load(file)
    found = OmegaConf.select(root, ".".join(p for p in (group, node) if p))
    values = {k: found[k] for k in names if k in found and not OmegaConf.is_missing(found, k)}
    return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in values.items()}


@functools.cache
def _root() -> DictConfig:
    """conf/config.yaml with the config group choices of its defaults list (each as its own file)."""
    root = OmegaConf.load(CONF / "config.yaml")
    assert isinstance(root, DictConfig)
    for choice in root.pop("defaults", []):
        if isinstance(choice, Mapping) and choice:
            (group, option), = choice.items()
            if "/" not in group and " " not in group:
                root[group] = _load(f"{group}/{option}.yaml")
    return root


@functools.cache
def _load(file: str) -> DictConfig:
    own = OmegaConf.load(CONF / file)
    assert isinstance(own, DictConfig)
    under = [_load(str(Path(file).parent / f"{d}.yaml")) for d in own.pop("defaults", [])
             if isinstance(d, str) and d != "_self_" and not d.startswith("/")]
    merged = OmegaConf.merge(*under, own)
    assert isinstance(merged, DictConfig)
    return merged


def nested(cls: Any) -> Any:
    """The validator of a field holding another settings class: a mapping (a config node) is built into it; its errors
    are pydantic's, at the path of the outer field (the key named is where the value stands)."""

    def build(value: Any) -> Any:
        if isinstance(value, dict):
            obj = cls.__new__(cls)
            cls.__checked_init__(obj, **value)
            return obj
        return value

    return BeforeValidator(build)


# ---------------------------------------------------------------- one line per refusal

def error_line(e: ValidationError, cls: type, prefix: str) -> str:
    """The first error of ``e`` as one line: ``<key> must be <what the field takes>, got <value>``."""
    err = e.errors()[0]
    inner = (err.get("ctx") or {}).get("error")
    path, field, owner = _field_path(cls, err["loc"])
    key = ".".join(p for p in (prefix, *path) if p)
    kind = err["type"]
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        names = ", ".join(f.name for f in dataclasses.fields(owner)) if dataclasses.is_dataclass(owner) else ""
        return f"unknown setting {key}" + (f"; the settings of {key.rpartition('.')[0] or 'this run'}: {names}"
                                           if names else "")
    if kind == "value_error":
        text = str(inner) if inner is not None else err["msg"]
        sentence = not path or _settings_class(field.annotation) is not None
        return text if sentence else f"{key} {text}"  # a field's rule follows its key; a class's rule is a sentence
    what = _describe(field.annotation, field.metadata) if field is not None else "valid"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        return f"{key} is required: {what}"
    item = [p for p in err["loc"][len(path):] if isinstance(p, int)]  # an item of a list
    got = redact(repr(err.get("input")))  # a key-looking string is redacted
    return f"{key} must be {what}, got {got}" + (f" (item {item[-1]})" if item else "")


def _field_path(cls: type, loc: tuple) -> tuple[list[str], Any, Any]:
    """The field names along ``loc`` (union member tags and list indices left out), the last field's info and, for
    an unknown key, the settings class it was given to."""
    path: list[str] = []
    field = None
    owner: Any = cls
    for part in loc:
        fields = getattr(owner, "__pydantic_fields__", None)
        if not isinstance(part, str) or fields is None:
            continue
        path.append(part)
        if part not in fields:  # an unknown key
            break
        field = fields[part]
        owner = _settings_class(field.annotation)
    return path, field, owner


def _settings_class(annotation: Any) -> Any:
    """The settings class among the types a value may have (``X | None`` and ``Annotated[X, ...]`` unwrapped)."""
    return next((t for t, _ in _parts(annotation, [])
                 if dataclasses.is_dataclass(t) and hasattr(t, "__pydantic_fields__")), None)


def _parts(annotation: Any, meta: list[Any]) -> list[tuple[Any, list[Any]]]:
    """(type, its constraints) of each type a value may have."""
    if hasattr(annotation, "__metadata__"):  # Annotated[X, Field(...), ...]
        return _parts(annotation.__origin__, [*meta, *annotation.__metadata__])
    if get_origin(annotation) in (Union, types.UnionType):
        return [p for a in get_args(annotation) for p in _parts(a, meta)]
    flat = [c for m in meta for c in (getattr(m, "metadata", None) or [m])]  # a FieldInfo holds its constraints
    return [(annotation, flat)]


def _describe(annotation: Any, metadata: list[Any]) -> str:
    null = any(t is type(None) for t, _ in _parts(annotation, metadata))
    return " or ".join(_kinds(annotation, metadata)) + (" or null" if null else "")


def _kinds(annotation: Any, metadata: list[Any]) -> list[str]:
    """How each type a value may have is said, null left out."""
    parts = [(t, m) for t, m in _parts(annotation, metadata) if t is not type(None)]
    number = any(t is float for t, _ in parts)  # Number: int | float, said once
    return [_kind(t, m) for t, m in parts if not (number and t is int)]


_WORDS = {bool: "true or false", int: "an integer", float: "a finite number", dict: "a mapping"}  # a setting's type
_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))  # a constraint's attribute and how it is said


def _kind(t: Any, meta: list[Any]) -> str:
    non_empty = any(getattr(m, "min_length", None) for m in meta)
    origin = get_origin(t)
    if t is str:
        return "a non-empty string" if non_empty else "a string"
    if (origin or t) in _WORDS:  # dict[str, X]: a mapping, as dict
        return _WORDS[origin or t] + _bounds(meta)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(t))
    if origin in (list, tuple):
        items = " or ".join(_plural(k) for k in _kinds((get_args(t) or (Any,))[0], []))
        return ("a non-empty list" if non_empty else "a list") + ("" if items == "Any" else f" of {items}")
    if dataclasses.is_dataclass(t):
        return "a mapping of its settings"
    return getattr(t, "__name__", str(t))


def _plural(text: str) -> str:
    """``an integer >= 1`` -> ``integers >= 1`` (numbers and strings; any other kind as it is)."""
    return re.sub(r"^an? (non-empty )?(integer|finite number|string)", r"\1\2s", text)


def _bounds(metadata: list[Any]) -> str:
    """`` >= 1``, `` in (0, 1]``: the field's bounds as a refusal says them (the last of a side wins)."""
    found = [(side, _num(v)) for m in metadata for attr, side in _BOUNDS if (v := getattr(m, attr, None)) is not None]
    lo, hi = [b for b in found if b[0][0] == ">"], [b for b in found if b[0][0] == "<"]
    if lo and hi:
        return f" in {'[' if lo[-1][0] == '>=' else '('}{lo[-1][1]}, {hi[-1][1]}{']' if hi[-1][0] == '<=' else ')'}"
    return f" {found[-1][0]} {found[-1][1]}" if found else ""


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, (int, float)) and float(v).is_integer() else repr(v)
