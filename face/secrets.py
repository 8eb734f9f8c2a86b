"""Secrets by construction: recognise a credential in a setting before anything is written, and redact one from
every string that is logged or stored.

* ``secret_in_overrides(argv)`` / ``secret_setting(cfg)``: the one line (naming the setting, never the value)
  that refuses a command line or a composed config carrying a credential: a setting or header whose NAME says
  key / token / secret / password / Authorization, a VALUE that looks like an API key (``sk-...``,
  ``Bearer ...``, a long random token), a URL with user-info (``http://user:pass@host``), or an
  ``api_key_env`` that holds a key instead of the NAME of an environment variable. The entry points call them
  before Hydra writes ``.hydra/`` and before the run starts (``scripts/run.py``, ``face evaluate --set``).
* ``redact(text)``: the text with key-looking substrings, URL user-info and every registered secret value
  (``register``: the API key read from the environment) replaced by ``***``. Log records (``install_log_redaction``),
  the one-line stop messages, MLflow params / tags / run names and table captions pass through it.

The bottom layer (imports nothing of face): every other module may use it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_PREFIXES = ("sk-", "sk_", "pk-", "rk-", "hf_", "gsk_", "xai-", "AIza", "ghp_", "gho_", "github_pat_",
                 "glpat-", "xoxb-", "xoxp-", "AKIA", "Bearer ", "Basic ")

# substrings of a text that are credentials (each replaced by MASK, or its group 1 kept and the rest masked)
_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:sk|pk|rk)[-_][A-Za-z0-9_\-]{8,}|hf_[A-Za-z0-9]{8,}|gsk_[A-Za-z0-9]{8,}"
    r"|xai-[A-Za-z0-9]{8,}|AIza[0-9A-Za-z_\-]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|glpat-[A-Za-z0-9_\-]{16,}|xox[abprs]-[A-Za-z0-9\-]{8,}|AKIA[0-9A-Z]{16})")
# "Bearer <token>" (any case); "Basic <base64>" only capitalised and with an upper-case letter, digit or base64 sign
# after its first character ("Basic statistics" is prose)
_SCHEME_AUTH = re.compile(r"(?i:\b(bearer)(\s+)(?!\*\*\*)[A-Za-z0-9._~+/=\-]{4,})"
                          r"|\b(Basic)(\s+)(?=[A-Za-z0-9+/]{8})(?=.[a-z0-9+/]*[A-Z0-9+/=])[A-Za-z0-9+/]+={0,2}")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)(?!\*\*\*@)[^/\s@?#'\"]+@")
_NAMED = re.compile(
    r"(?i)((?:api[_\-]?key|secret|password|passwd|token|authorization|credentials?)['\"]?\s*[:=]\s*"
    r"['\"]?)(?!\*\*\*)((?:bearer\s+|basic\s+)?[^\s'\",;}&)\]]+)")
_LONG_RUN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{24,}(?![A-Za-z0-9])")

# a setting or header NAME that says it holds a credential: one of its words (split at _ - and camelCase) is one
# of these, or ends like one ("apikey", "accesstoken"); "tokens" (a count: max_tokens) and "tokenizer" are not
_SECRET_WORDS = {"key", "token", "secret", "password", "passwd", "pwd", "passphrase", "credential", "credentials",
                 "authorization", "auth", "cookie", "bearer"}
_WORD_SPLIT = re.compile(r"[_\-\s]+|(?<=[a-z0-9])(?=[A-Z])")

_registered: set[str] = set()


def is_env_var_name(value: str) -> bool:
    """A name of an environment variable, not an API key: a known key prefix, or long with mixed case and digits,
    is a key (an environment variable's name is not like that)."""
    v = value.strip()
    key = v.startswith(_KEY_PREFIXES) or (len(v) >= 24 and _random_looking(v)) or (len(v) >= 32 and not v.isupper())
    return bool(_ENV_NAME.fullmatch(value)) and not key


def secret_name(name: str) -> bool:
    """Whether a setting or header named ``name`` (``llm.openai_api_key``, ``llm.apikey``, ``Authorization``)
    would hold a credential. Not: ``api_key_env`` (the NAME of the variable holding the key; its value is
    checked instead), token counts (``max_tokens``, ``output_tokens``), ``tokenizer``."""
    last = str(name).rsplit(".", 1)[-1]
    if last.lower() == "api_key_env":
        return False
    words = [w.lower() for w in _WORD_SPLIT.split(last) if w]
    return any(w in _SECRET_WORDS or w.endswith(("key", "token", "secret", "password")) for w in words)


def _random_looking(run: str) -> bool:
    """A run of 24+ letters and digits with upper case, lower case and digits: a generated key (a hash is hex,
    lower case; a model or file name has separators)."""
    return any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)


def register(value: str | None) -> None:
    """Redact this exact value from now on (the API key read from the environment); short values are ignored
    (masking every "abc" would garble the logs, and such a value is no key)."""
    if value and len(value) >= 8 and value != "not-needed":
        _registered.add(value)


def redact(text: Any) -> str:
    """``text`` (made a string) with every credential replaced by ``***``: registered values, URL user-info,
    ``Bearer``/``Basic`` credentials, ``name=value`` / ``name: value`` pairs whose name says key, token,
    secret, password or Authorization, known key formats (``sk-``, ``hf_``, ``AIza``, ...) and long random
    tokens."""
    s = text if isinstance(text, str) else str(text)
    for value in sorted(_registered, key=len, reverse=True):
        s = s.replace(value, MASK)
    s = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", s)
    s = _NAMED.sub(lambda m: m.group(0) if _harmless(m.group(2)) else f"{m.group(1)}{MASK}", s)
    s = _SCHEME_AUTH.sub(lambda m: f"{m.group(1) or m.group(3)}{m.group(2) or m.group(4)}{MASK}", s)
    s = _PREFIXED.sub(MASK, s)
    return _LONG_RUN.sub(lambda m: MASK if _random_looking(m.group(0)) else m.group(0), s)


def _harmless(value: str) -> bool:
    """A value after a credential-like name that is no credential: empty, null, a number, already masked."""
    v = value.strip().lower()
    return v in ("", "null", "none", "~", "false", "true") or v.startswith(MASK) or v.replace(".", "", 1).isdigit()


def contains_secret(text: str) -> bool:
    return redact(text) != text


# ---------------------------------------------------------------- refusing a setting
def _problem(setting: str, value: Any) -> str | None:
    """What is wrong with ``setting`` holding ``value`` (a scalar), or None."""
    if value is None or isinstance(value, (bool, int, float)):  # a number or a switch is no credential
        return None
    text = str(value).strip().strip("'\"")
    if text in ("", "null", "None"):
        return None
    if setting.rsplit(".", 1)[-1] == "api_key_env":
        return None if is_env_var_name(text) else (
            f"{setting} must be the NAME of an environment variable (letters, digits, _), not the key itself: put "
            f"the key in the environment and set {setting}=OPENAI_API_KEY (its name)")
    if secret_name(setting):
        return (f"{setting} is refused: a credential in a setting would be written to .hydra/, run.log and "
                "MLflow; put the key in an environment variable and name it in llm.api_key_env")
    if _URL_USERINFO.search(text):
        return (f"{setting} is refused: a URL with a user name or password in it (user:pass@host) would be "
                "written to .hydra/, run.log and MLflow; give the key through llm.api_key_env (MLflow: the "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD variables)")
    if contains_secret(text):
        return (f"{setting} is refused: its value looks like a credential (an API key or token) and would be "
                "written to .hydra/, run.log and MLflow; put the key in an environment variable and name it in "
                "llm.api_key_env")
    return None


_INNER_NAME = re.compile(r"(?:^|[{,\[\s])['\"]?([A-Za-z_][\w\-]*)['\"]?\s*:(?!//)")


def secret_in_overrides(overrides: Iterable[str]) -> str | None:
    """The refusal line (naming the setting) of the first ``key=value`` override carrying a credential -- in its
    name, its value, or a name inside a dict value (``+llm.headers={Authorization: ...}``) -- or None. Works on
    the raw text, so it holds for overrides Hydra would reject, sweeps (``a,b``) and ``hydra.*`` settings."""
    for arg in overrides:
        key, eq, value = str(arg).partition("=")
        if not eq:
            continue
        key = key.lstrip("+~")
        inner = next((n for n in _INNER_NAME.findall(value) if secret_name(n)), None)
        problem = _problem(f"{key}.{inner}", "<set>") if inner and not secret_name(key) else _problem(key, value)
        if problem:
            return problem
    return None


def _leaves(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            if secret_name(str(k)) and isinstance(v, (Mapping, list, tuple)) and v:
                yield f"{path}.{k}" if path else str(k), "<set>"
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, node


def secret_setting(cfg: Any) -> str | None:
    """The refusal line (naming the setting) of the first setting of a composed config (a DictConfig or a dict)
    that carries a credential, or None. Interpolations are checked as written and, where they resolve without a
    running Hydra job, as resolved (``${oc.env:...}``)."""
    from omegaconf import DictConfig, OmegaConf

    resolved = cfg if isinstance(cfg, DictConfig) else None
    for path, value in _leaves(OmegaConf.to_container(cfg, resolve=False) if resolved is not None else cfg, ""):
        problem = _problem(path, value)
        if not problem and resolved is not None and isinstance(value, str) and "${" in value and "[" not in path:
            # an interpolation only a running Hydra job resolves (${hydra:...}) raises: checked as written only
            with contextlib.suppress(Exception):
                problem = _problem(path, OmegaConf.select(resolved, path, default=None, throw_on_missing=False))
        if problem:
            return problem
    return None


# ---------------------------------------------------------------- logs
def scrub(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it as usual
        return record
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    return record


@functools.cache  # installed once per process
def install_log_redaction() -> None:
    """Every log record made from now on, by any logger, is redacted when it is created (before any handler --
    Hydra's console and ``run.log`` handlers, MLflow's own -- formats it). A record factory rather than a
    filter: a filter on a logger misses records propagated from its children, and one on a handler misses
    handlers added later (Hydra reconfigures logging for every job)."""
    make = logging.getLogRecordFactory()
    logging.setLogRecordFactory(lambda *args, **kwargs: scrub(make(*args, **kwargs)))
