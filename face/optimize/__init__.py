"""Instruction optimization for FACE: textual gradients, rewrites, a beam and a UCB bandit.

One unit per file, each usable alone:

- ``config``      OptimizerConfig (``conf/optimizer/*.yaml``), validated before anything runs
- ``split``       conversation-level train / dev / test folds, stratified by system, seeded
- ``items``       evaluation items (a labelled turn or dialogue), rewards (correlations), prediction errors
- ``bandit``      UCB1 over candidates (and the uniform / random baselines)
- ``scorers``     the scorer the loop talks to: ``LiveScorer`` (FACE scoring through face/llm) or
                  ``ReplayScorer`` (the authors' released per-particle scores as an oracle)
- ``gradients``   textual gradients: an LLM critiques an instruction from its worst-predicted items
- ``rewrites``    an LLM rewrites an instruction from one critique (task, numbered steps, checks)
- ``beam``        the loop: expand (gradients -> rewrites) and select (bandit) per round
- ``checkpoint``  the loop's state on disk after every round; resume refuses another config
- ``registry``    MLflow Prompt Registry: every candidate a version, lineage in its tags; references
- ``cost``        the dry-run estimate of calls and cost per round and in total
- ``run``         experiment ``optimize_instructions`` (live loop)
- ``selection``   experiment ``optimize_selection`` (replay: how well the bandit selects)
- ``sweep_report`` reads a sweep's runs back from MLflow: a table and plots
"""
