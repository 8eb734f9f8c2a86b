"""LLM access layer: every LLM call of the project goes through here.

    from face.llm import LLMConfig, ChatRequest, make_client
    with make_client(LLMConfig.from_dict(cfg.llm)) as client:
        results = client.run_batch(requests, desc="scoring")
        client.usage.summary()
"""
from .cache import SampleCache
from .client import (ChatRequest, ChatResult, Completion, LLMCallError, LLMClient, TokenLogprob,
                     make_client)
from .config import LLMConfig
from .usage import BudgetExceeded, Usage

__all__ = [
    "BudgetExceeded", "ChatRequest", "ChatResult", "Completion", "LLMCallError", "LLMClient", "LLMConfig",
    "SampleCache", "TokenLogprob", "Usage", "make_client",
]
