"""What the test files share, defined once (the fixtures built on it are in ``conftest.py``): chat logs written for
``face evaluate``, its command line, hand-built LLM configurations and chat requests, and a run through the one
front door (``face.runner.run``: composed, every setting and the credentials checked, outputs claimed, logs
redacted -- as every entry point runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAKE = "fake"  # the scripted LM without a socket (conf/llm/fake.yaml); "scripted" is the HTTP server


def write_logs(path: Path, convs: list[dict]) -> Path:
    """Chat logs as JSON Lines, one conversation a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")
    return path


def evaluate_argv(logs: Path, out: Path | str | None, *extra: str, aspects: str = "relevance", llm: str = FAKE,
                  cache_dir: Path | None = None, tiny: bool = True) -> list[str]:
    """``face evaluate``'s arguments for a small scripted run (``--yes``: nobody is asked)."""
    return ["evaluate", str(logs), "--aspects", aspects, "--llm", llm, "--yes",
            *([] if out is None else ["--out", str(out)]),
            *([] if cache_dir is None else ["--set", f"paths.cache_dir={cache_dir}"]),
            *(["--set", "run_size=tiny"] if tiny else []), *extra]


def evaluate(logs: Path, out: Path | None, *extra: str, **kw: Any) -> int:
    """``face evaluate`` in this process: its exit code."""
    from face.cli import main

    return main(evaluate_argv(logs, out, *extra, **kw))


def llm_config(tmp_path: Path | None = None, *, server: Any = None, base_url: str | None = None, **kw: Any):
    """An ``LLMConfig`` for a test: the scripted model, quick retries, no progress bar, no endpoint probe (tests that
    count requests; tests of the probe set ``probe=True``). Its endpoint: ``server`` (an ``InProcessServer``: its
    ``spec()``; or a spec dict), or ``base_url`` (an HTTP server the test started)."""
    from face.llm import LLMConfig

    if server is not None and hasattr(server, "spec"):
        server = server.spec()
    base: dict[str, Any] = {"backend": "scripted" if server is not None else "openai_compatible",
                            "server": server, "base_url": base_url, "model": "scripted-model", "progress": False,
                            "concurrency": 4, "timeout_s": 5.0, "max_retries": 4, "backoff_base_s": 0.01,
                            "backoff_max_s": 0.05, "probe": False}
    if tmp_path is not None:
        base["cache_dir"] = str(tmp_path / "cache")
    return LLMConfig(**{**base, **kw})


def chat_requests(k: int, text: str = "question {i}", *, n: int = 1, tag: str = "q", system: str | None = None,
                  **kw: Any) -> list:
    """``k`` chat requests of one user message each (``text`` formatted with the request's index ``i``), after a
    ``system`` message if given."""
    from face.llm import ChatRequest

    first = [] if system is None else [("system", system)]
    return [ChatRequest(messages=[*first, ("user", text.format(i=i))], n=n, tag=tag, **kw) for i in range(k)]


def run_overrides(overrides: list[str], **request: Any):
    """A run through the one front door (``face.runner.run``): its ``RunResult`` (``.cfg``: the task's composed
    configuration; ``.experiment``: what the experiment returned)."""
    from face.runner import RunRequest, run

    return run(RunRequest(overrides=tuple(overrides), **request))
