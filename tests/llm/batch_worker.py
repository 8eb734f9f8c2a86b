"""Subprocess worker for the SIGKILL test: runs one batch against a scripted server.

    python tests/llm/batch_worker.py BASE_URL CACHE_DIR N_REQUESTS CONCURRENCY
"""
import sys

from face.llm import ChatRequest, LLMConfig, make_client


def requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "user", "content": f"kill test {i}"}], tag="kill") for i in range(n)]


def config(base_url: str, cache_dir: str, concurrency: int) -> LLMConfig:
    return LLMConfig(backend="openai_compatible", base_url=base_url, model="scripted-model", cache_dir=cache_dir,
                     progress=False, concurrency=concurrency, timeout_s=5.0, backoff_base_s=0.01,
                     backoff_max_s=0.05)


if __name__ == "__main__":
    base_url, cache_dir, n, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with make_client(config(base_url, cache_dir, conc)) as client:
        client.run_batch(requests(n))
    print("DONE", flush=True)
