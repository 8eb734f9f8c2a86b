"""One module per paper experiment; each exposes ``run(cfg) -> ExperimentResult`` (face.experiments.result), called by
the runner (face.runner), and ``parts(cfg)`` where it needs more than the skeleton (face.experiments.common.Parts)."""
