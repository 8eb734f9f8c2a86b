"""The process side of the ``local`` backend (face/llm/local.py): the child's environment and launcher, the tail of
its log, and the SIGTERM guard that lets a terminated parent stop its servers."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

# The server's settings are pydantic-settings classes without an env prefix, so environment
# variables such as HOST, PORT, API_KEY, MODEL or CONFIG_FILE would silently change (or
# lock) the server. They are removed from the child's environment (names matched
# case-insensitively, as pydantic-settings does). Field list of llama-cpp-python 0.3.36.
SERVER_ENV_NAMES = frozenset(
    """
    api_key cache cache_size cache_type chat_format chat_template_kwargs clip_model_path
    config_file disable_ping_events draft_model draft_model_num_pred_tokens embedding
    flash_attn hf_model_repo_id hf_pretrained_model_name_or_path hf_tokenizer_config_path
    host interrupt_requests kv_overrides last_n_tokens_size logits_all lora_base lora_path
    main_gpu model model_alias models mul_mat_q n_batch n_ctx n_gpu_layers n_threads
    n_threads_batch n_ubatch numa offload_kqv port root_path rope_freq_base rope_freq_scale
    rope_scaling_type rpc_servers seed split_mode ssl_certfile ssl_keyfile tensor_split
    type_k type_v use_mlock use_mmap verbose vocab_only yarn_attn_factor yarn_beta_fast
    yarn_beta_slow yarn_ext_factor yarn_orig_ctx
    """.split()  # noqa: SIM905 - the field list reads best as text
)

# Runs in the child before exec'ing the server: asks the kernel to SIGKILL it when the
# starting thread goes away (Linux only), and exits if the parent is already gone.
LAUNCHER = """\
import ctypes, os, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != parent:
    sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in SERVER_ENV_NAMES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def log_tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


_OWNERS: set[int] = set()  # the servers that run, started from the main thread


def guard_sigterm(owner: object) -> None:
    """SIGTERM's default action ends Python without running ``finally``/``__exit__``/atexit. While at least one server
    runs, SIGTERM (unless someone else already handles it) raises ``SystemExit`` in the main thread instead, so the
    normal clean-up path stops the servers."""
    if threading.current_thread() is threading.main_thread():
        if not _OWNERS and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _raise_system_exit)
        _OWNERS.add(id(owner))


def unguard_sigterm(owner: object) -> None:
    """SIGTERM's default action back when the last server stops."""
    _OWNERS.discard(id(owner))
    main = threading.current_thread() is threading.main_thread()
    if not _OWNERS and main and signal.getsignal(signal.SIGTERM) is _raise_system_exit:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_system_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
