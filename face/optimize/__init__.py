"""Instruction optimization for FACE: textual gradients, rewrites, a beam and a UCB bandit.

One unit per file, each usable alone:

- ``config``      OptimizerConfig (``conf/optimizer/*.yaml``), validated before anything runs
- ``items``       evaluation items (a labelled turn or dialogue), rewards (correlations), prediction errors
- ``bandit``      UCB1 over candidates (and the uniform / random baselines)
- ``scorers``     the scorer the loop talks to: ``LiveScorer`` (FACE scoring through face/llm) or
                  ``ReplayScorer`` (the authors' released per-particle scores as an oracle)
- ``writer``      textual gradients (an LLM critiques an instruction from its worst-predicted items) and rewrites
                  (an LLM rewrites an instruction from one critique: task, numbered steps, checks)
- ``beam``        the loop: expand (gradients -> rewrites) and select (bandit) per round
- ``checkpoint``  the loop's state on disk after every round; resume refuses another config
- ``prompt_log``  MLflow Prompt Registry: every candidate a version, lineage in its tags; references
- ``estimate``    the dry-run estimate of calls and cost per round and in total

The split is ``face.data.split``; the experiments are ``face.experiments.optimize_instructions`` (live loop),
``optimize_selection`` (replay: how well the bandit selects) and ``sweep_report`` (a sweep read back from MLflow).
"""
