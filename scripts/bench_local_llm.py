"""Measure the local LLM backend on this machine: startup, latency, tokens/s, and features.

    python scripts/bench_local_llm.py [--prompt-tokens 600] [--answer-tokens 20] [--repeats 3]

Starts the server through face.llm.local.LocalServer (or reuses --reuse-url), then sends
chat completions with the openai SDK and prints one line per measurement plus a JSON summary.
Bounded: a few requests to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import openai

from face.llm.local import LocalServer

FILLER = (
    "The user asked for a science-fiction film with a strong female lead and the system "
    "recommended Alien, explaining the plot and asking whether the user liked horror. "
)


def _prompt(target_tokens: int) -> list[dict[str, str]]:
    """A user message of roughly ``target_tokens`` prompt tokens (checked via usage)."""
    repeats = max(1, target_tokens // 30)
    text = FILLER * repeats + "\nIn one short sentence, was the recommendation good?"
    return [{"role": "user", "content": text}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=600)
    parser.add_argument("--answer-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--reuse-url", default=None)
    args = parser.parse_args()

    t0 = time.monotonic()
    with LocalServer({"n_threads": args.n_threads, "n_ctx": args.n_ctx,
                      "reuse_url": args.reuse_url}) as server:
        startup = time.monotonic() - t0
        print(f"startup: {startup:.2f} s  ({server.base_url}, model={server.model})")
        client = openai.OpenAI(base_url=server.base_url, api_key="local", timeout=300, max_retries=0)
        messages = _prompt(args.prompt_tokens)

        latencies, prompt_tps, gen_tps = [], [], []
        for i in range(args.repeats):
            # vary the prompt so llama-cpp-python's prefix reuse does not hide prompt cost
            msgs = [{"role": "user", "content": f"[{i}] " + messages[0]["content"]}]
            start = time.monotonic()
            out = client.chat.completions.create(
                model=server.model, messages=msgs, max_tokens=args.answer_tokens,
                temperature=0.0, logprobs=True, top_logprobs=5,
            )
            elapsed = time.monotonic() - start
            usage = out.usage
            latencies.append(elapsed)
            print(f"request {i}: {elapsed:.2f} s, prompt {usage.prompt_tokens} tok, "
                  f"completion {usage.completion_tokens} tok")

        # separate prompt processing from generation: 1-token answer vs. long answer
        start = time.monotonic()
        out1 = client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "[p] " + messages[0]["content"]}],
            max_tokens=1, temperature=0.0)
        t_prompt = time.monotonic() - start
        prompt_tps.append(out1.usage.prompt_tokens / t_prompt)
        start = time.monotonic()
        out2 = client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "Tell a long story about a robot."}],
            max_tokens=128, temperature=0.0)
        t_gen = time.monotonic() - start
        gen_tps.append(out2.usage.completion_tokens / t_gen)

        summary = {
            "startup_s": round(startup, 2),
            "prompt_tokens": out.usage.prompt_tokens,
            "answer_tokens": args.answer_tokens,
            "latency_s_median": round(statistics.median(latencies), 2),
            "prompt_tokens_per_s": round(prompt_tps[0], 1),
            "generation_tokens_per_s": round(gen_tps[0], 1),
            "n_threads": args.n_threads,
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
