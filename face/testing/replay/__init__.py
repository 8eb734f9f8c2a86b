"""The replay judge: an OpenAI-compatible server that answers FACE's prompts with the FACE authors' released
judgements of CRSArena-Eval, so that the live method can be checked end to end against the paper with no LLM.

What it serves (read from a data directory laid out as the project fetches it, ``DATA_FILES``):
* a **scoring** request — one particle of one conversation, one aspect, one of the authors' top-16
  instructions — gets the authors' judgement of that particle under that instruction. The released value is
  the mean of their 5 sampled scores (always a multiple of 0.2), so it is answered as integer samples:
  sample k of a prompt (k = the request's ``seed`` + the choice index) is the (k mod 5)-th of the five
  integers ``x_i = floor((i+1)·5v/5) − floor(i·5v/5)``; any 5 consecutive samples have exactly the released
  mean, and the mean of the first m is within 1/m of it (the rule for n ≠ 5). A reasoned prompt gets a line
  of text, then ``{"score": x}``; the compact prompt (``method.reasoning=false``) gets ``{"score": x}``
  alone. With ``logprobs`` the reply's score token carries a top-logprobs distribution on ``floor(v)`` and
  ``ceil(v)`` whose expectation is ``v``.
* a **decomposition** request gets the authors' particles of the turn it shows (``{"particles": [...]}``;
  an empty list where they found none), after a line of text for the reasoned prompt.
* anything else — another method's prompt, a whole turn or dialogue instead of a particle, a dialogue,
  turn, particle or instruction the authors never judged, a scale that is not the aspect's — gets HTTP 400
  with a JSON error saying what could not be identified and why. The client stops on it (a request the
  endpoint refuses is not retried, not cached and never scored as an invalid answer).

How a request is identified: from what its prompt shows, as an LLM reads it — the dialogue (or the turn
with its history and the user's response), the turn number where shown, the particle's dialogue act, mention
and user feedback, the instruction, the aspect and its scale — compared after whitespace normalisation with
the data. Never from an id the client adds, and never by rendering a prompt with the project's prompt code:
this module reads the prompt's sections by their headings and knows the data, nothing else of the project.

Conversation copies (``dataset.repeat=K``, for scale benchmarks: " (copy k)" after every utterance) are read
as their original.

Identical prompts: where several released particles read the same in a prompt (same turn, dialogue act,
mention and feedback: 72 particles of CRSArena-Eval in 31 groups), the prompt is one request for the client
(one cache key); the replay answers it with the first of them (conversation file order, then turn, then
particle) and counts it (``/v1/replay/stats``: ``ambiguous_requests``, and each distinct prompt with its
candidates and their values).

Run:   python -m face.testing.replay --data-dir data/raw --port 8000     (prints "READY <base_url>")
As the configured server of a client (``llm=replay``): ``ReplayServer`` starts it in a process of its own.
"""
from __future__ import annotations

from .answers import Judge, sample_values
from .data import ReplayData
from .reader import Refusal, read_prompt
from .server import ReplayServer

__all__ = ["Judge", "Refusal", "ReplayData", "ReplayServer", "read_prompt", "sample_values"]
