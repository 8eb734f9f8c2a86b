"""Baselines of the FACE paper as methods (``face.methods.Method``): each is one module plus one config.

- ``reference``: reference-based metrics on USR (BLEU-1..4, METEOR, ROUGE-L) with the implementation USR used
  (pycocoevalcap, through nlg-eval); no LLM.
- ``llm``: LLM-Direct, LLM-CoT+ICL and G-Eval, on any dataset and any ``llm=``.
- ``transfer``: FACE's CRSArena instructions applied to another dataset's qualities through a documented
  aspect mapping (no tuning on the target data).
- ``published``: numbers that cannot be recomputed here (UniEval, GPTScore, BERTScore, USR), kept as
  published values with their citation.
"""
