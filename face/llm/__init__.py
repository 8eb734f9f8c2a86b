"""LLM access layer: every LLM call of the project goes through here.

    from face.llm import LLMConfig, ChatRequest, make_client
    with make_client(LLMConfig.from_dict(cfg.llm)) as client:   # client satisfies face.llm.LM
        results = client.run_batch(requests, desc="scoring")
        client.usage.summary()

Modules: base (records, the LM protocol), transport (HTTP + retries), budget (caps, dry run,
accounting), cache (per-sample SQLite cache), client (server start-up, the stack, batches),
adapters (typed JSON answers), validating (the one draw-until-valid loop), stream (the one batch driver), sizes (the
request arithmetic: HTTP requests, samples, tokens, bounds), local (the embedded llama.cpp
server started beside the client). The test servers (scripted, fault proxy, replay) are in ``face.testing``.
"""
from .base import LM, ChatRequest, Completion, Draws, LLMCallError, LLMRequestRefused, TokenLogprob
from .cache import SampleCache
from .client import LLMClient, make_client
from .config import LLMConfig
from .usage import BudgetExceeded

__all__ = ["LM", "BudgetExceeded", "ChatRequest", "Completion", "Draws", "LLMCallError", "LLMClient", "LLMConfig",
           "LLMRequestRefused", "SampleCache", "TokenLogprob", "make_client"]
