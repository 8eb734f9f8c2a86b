"""One module per paper experiment; each exposes ``run(cfg) -> dict`` (called by scripts/run.py)."""
