"""Tables (Markdown, CSV, LaTeX) and figures (PNG) written to results/ and logged to MLflow."""
