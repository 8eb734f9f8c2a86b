# Set-up and everyday commands. Every target installs what it needs first (a venv in .venv).
#   make run    — the main job: reproduce the FACE row of Table 2 from the released scores (no LLM, no key)
#   make notebook — run notebooks/ through a Jupyter kernel (executed copies in notebooks/executed/)
#   make test   — lint + the whole test suite: the fast tests on both cores, then the slow ones (embedded local LLM)
# Without internet, point FACE_DATA_MIRROR at a copy of the data, e.g. FACE_DATA_MIRROR=../shared/data make run
#
# `make run` installs only the main environment (requirements.lock). The embedded local LLM
# (llama-cpp-python, compiled from source: ≈ 4 min on 2 cores with an empty pip cache; skipped, seconds, when pip has
# the wheel cached) is installed by `make test`,
# `make setup-local`, or on the first `llm=local` run (face/llm/local.py says so while it builds).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: setup setup-local setup-browser run test test-fast test-slow lint results notebook bench bench-scale mutation mlflow-ui clean-cache

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install -r requirements.lock
	$(BIN)/pip install --no-deps -e .
	touch $@

$(VENV)/.installed-local: requirements-local.txt $(VENV)/.installed
	@echo "Installing the embedded local LLM: llama-cpp-python compiles llama.cpp (≈ 4 min on 2 cores) unless pip has the wheel cached (then seconds)"
	$(BIN)/python -m face.llm.local
	touch $@

setup: $(VENV)/.installed

setup-local: $(VENV)/.installed-local

# headless Chromium for the test that renders report.html (Debian's package, ≈ 20 s once); where there is no apt-get
# or no root, the test says it is skipped
setup-browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "Installing headless Chromium (Debian's chromium package) for the report's rendering test"; \
	    apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; } || \
	    echo "warning: could not install Chromium: the report's rendering test will be skipped"; \
	  else echo "warning: no Chromium (and no apt-get as root): the report's rendering test will be skipped"; fi; }

run: setup
	$(BIN)/python scripts/run.py $(ARGS)

# ruff (with mccabe's complexity rule, at most 10), the import layers, the room sizes (scripts/check_sizes.py),
# mypy on face/ ([tool.mypy] in pyproject.toml)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_sizes.py
	$(BIN)/mypy

# the fast suite on both cores (pytest-xdist), then the slow tests on both cores, then the few marked serial (they
# time a server, kill a run found by polling, or run the embedded LLM) one at a time.
# Bytecode caches are written for the test runs even where the environment says not to (PYTHONDONTWRITEBYTECODE=1):
# without them every pytest worker and every entry point a test starts as a process compiles face/ and the tests
# again (≈ 6 s of CPU each). compileall first makes every __pycache__/ before a test runs: the reliability suite's
# cases watch the project tree, and a __pycache__/ made beside them (a directory's mtime) would look like a write.
test test-fast test-slow: export PYTHONDONTWRITEBYTECODE :=
PYCACHE = $(BIN)/python -m compileall -q -j 0 face scripts tests >/dev/null
SLOW = $(BIN)/python -m pytest -q -m "slow and not serial" -n 2 $(ARGS) && \
       $(BIN)/python -m pytest -q -m "slow and serial" $(ARGS)

test: setup-local setup-browser lint
	$(PYCACHE)
	$(BIN)/python -m pytest -q -m "not slow" -n 2 $(ARGS)
	$(SLOW)

test-fast: setup setup-browser
	$(PYCACHE)
	$(BIN)/python -m pytest -q -m "not slow" -n 2 $(ARGS)

test-slow: setup-local
	$(PYCACHE)
	$(SLOW)

# regenerate every committed table and figure that needs no LLM (replay_table2: the replay judge, ≈ 11 min)
results: setup
	$(BIN)/python scripts/run.py experiment=reproduce_table2
	$(BIN)/python scripts/run.py experiment=system_level
	$(BIN)/python scripts/run.py experiment=system_comparison
	$(BIN)/python scripts/run.py experiment=sequential_comparison
	$(BIN)/python scripts/run.py experiment=ablation_num_instructions
	$(BIN)/python scripts/run.py experiment=cost_frontier
	$(BIN)/python scripts/run.py experiment=ablation_aggregation
	$(BIN)/python scripts/run.py experiment=diagnostics
	$(BIN)/python scripts/run.py experiment=optimize_selection
	$(BIN)/python scripts/run.py experiment=usr_reference_metrics
	$(BIN)/python scripts/run.py experiment=replay_table2

# every notebook run top to bottom through a Jupyter kernel (nbclient); executed copies in notebooks/executed/
notebook: setup
	$(BIN)/python scripts/run_notebooks.py $(ARGS)

bench: setup
	$(BIN)/python scripts/bench_main.py
	$(BIN)/python scripts/bench_llm.py
	$(BIN)/python scripts/bench_job.py

# paper scale: replay_table2 cold / warm / kill -9 + resume, a bare AsyncOpenAI loop beside it (≈ 35 min); ARGS e.g.
# ARGS="--repeat 1,2,4 --no-warm --no-kill" for memory against data size
bench-scale: setup
	$(BIN)/python scripts/bench_scale.py $(ARGS)

# mutation testing of aggregate, metaeval, significance, runfile, scoring's answer reading and the money and
# bookkeeping modules (llm/sizes, pipeline/estimate, llm/usage, llm/budget, llm/cache, llm/claims, llm/stream,
# llm/validating, Draws.room, pipeline/scoring, pipeline/records): each module's own tests against small ast
# mutants and hand-written semantic ones (scripts/mutation.py, scripts/mutants_semantic.py; not part of make test);
# ARGS e.g. "--only llm/usage --jobs 1"
mutation: setup
	FACE_DATA_MIRROR="$${FACE_DATA_MIRROR:-../shared/data}" $(BIN)/python scripts/mutation.py $(ARGS)

mlflow-ui: setup
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5000

clean-cache:
	$(BIN)/python -m face.llm clear --cache-dir data/cache/llm
