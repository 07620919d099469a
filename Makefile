# The course's commands. `make book` and `make test` are the two README promises.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

# Quiet TensorFlow in every process started from here (kernels inherit it).
export TF_CPP_MIN_LOG_LEVEL := 3
export TF_ENABLE_ONEDNN_OPTS := 0
export KERAS_BACKEND := tensorflow
export PYTHONHASHSEED := 0

.PHONY: help venv system-deps book book-clean test test-fast durations lint serve lab bench bench-attention bench-build bench-grading bench-kv bench-fairness bench-gpu grade release references constraints clean

help:
	@echo "make book   - create .venv if missing, build the executed book into _build/html"
	@echo "              and its Chinese edition into _build/html/zh (book/zh/README.md)"
	@echo "make test   - create .venv if missing, lint, then run the whole test suite"
	@echo "make test-fast - every test not marked slow: the library, the grader's units,"
	@echo "              the book's sources; no book build, grading run, browser or hub"
	@echo "make durations - the slowest tests and the time per file of the last make test"
	@echo "make serve  - serve the built site on http://localhost:8000"
	@echo "make lab    - open the course in JupyterLab"
	@echo "make lint   - ruff format --check and ruff check over every Python file"
	@echo "make bench  - benchmarks (attention speed, book build, grading); figures go to"
	@echo "              _build/bench/ (JSON + markdown); or one: bench-attention,"
	@echo "              bench-build, bench-grading, bench-kv (KV-cache decoding speed)"
	@echo "make bench-fairness - honest grading time alone vs beside a CPU hog"
	@echo "make bench-gpu - CUDA only: the Triton attention kernel vs PyTorch's kernels"
	@echo "make grade  - instructors: generate, autograde, feedback, grades.csv for submitted/"
	@echo "              (WORKERS=n Dask workers on this machine; default: one per core)"
	@echo "make release     - regenerate the student release exercises/ from solutions/"
	@echo "make references  - regenerate the hidden reference data solutions/*/hidden/"

venv: $(DEV_STAMP)

# Debian packages the browser, sandbox, classroom and gradebook tests use
# (root; CI runs it): Chromium, bubblewrap, PostgreSQL (the tests start their own
# server; the package's default cluster is not used).
system-deps:
	apt-get update
	apt-get install -y --no-install-recommends chromium bubblewrap postgresql

# The JupyterHub proxy for the classroom test (npm registry, pinned in the lock file).
CHP := classroom/node_modules/.package-lock.json
$(CHP): classroom/package.json classroom/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix classroom --no-audit --no-fund; \
	else echo "npm not found: the classroom test will fail (needs configurable-http-proxy)"; fi

# requirements.txt: what a learner and the book need (`make book`, `make lab`);
# requirements-dev.txt adds the tests, grading, benchmarks and classroom.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --no-deps -e . --config-settings editable_mode=compat
	touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/python -m pip install -r requirements-dev.txt -c constraints.txt
	touch $@

book: $(STAMP)
	$(BIN)/python book/_ext/execute_parallel.py
	$(BIN)/jupyter-book build . -W -n --keep-going
	$(BIN)/python book/_ext/zh_edition.py build
	@echo
	@echo "The site is in _build/html, the Chinese edition in _build/html/zh. View it with:"
	@echo "    $(BIN)/python -m http.server -d _build/html 8000   # then open http://localhost:8000"

book-clean:
	rm -rf _build

# Lint first: a formatting or lint error fails `make test` before any test runs.
# Every run leaves a JUnit report; `make durations` (and CI) print where the
# minutes went from it.
test: lint $(CHP)
	mkdir -p _build
	$(BIN)/python -m pytest --junitxml=_build/junit.xml

# Every test not marked `slow` (no book build, no real grading run, browser,
# PostgreSQL or hub); a test whose tool is missing skips, naming it (fails in CI).
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -m "not slow"

durations:
	$(BIN)/python tests/support/durations.py _build/junit.xml --md _build/durations.md

# Every Python file (pyproject.toml [tool.ruff] says which are excluded).
lint: $(DEV_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# Benchmarks (figures, never pass/fail): each writes <name>.json + <name>.md to
# _build/bench/. `make bench` runs all three, one after the other (~30 min).
bench: bench-attention bench-build bench-grading bench-kv

bench-attention: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/attention_speed.py --out _build/bench/attention_speed.json

bench-build: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/book_build.py --out _build/bench/book_build.json

bench-grading: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/grading_speed.py --out _build/bench/grading_speed.json

bench-kv: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/kv_cache_speed.py --out _build/bench/kv_cache_speed.json

# The Triton FlashAttention-2 kernel vs SDPA's flash / memory-efficient / math
# kernels and the library's naive and tiled versions (CUDA only: without a GPU
# it prints why it skips and exits 0; not part of `make bench`). RECORD=1 also
# writes bench/results/<gpu>.json, which the attention-kernel chapter reads.
bench-gpu: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/gpu_attention.py --out _build/bench/gpu_attention.json \
	  $(if $(RECORD),--record)

# An honest submission's grading time alone and beside a CPU hog (forkpty
# children in their own sessions; spinners under the process cap), with and
# without the sandbox's CPU share: the ratios (~10 min; not part of `make bench`).
bench-fairness: $(DEV_STAMP)
	mkdir -p _build/bench
	$(BIN)/python bench/cpu_fairness.py --out _build/bench/cpu_fairness.json

# Dask workers of the embedded cluster (default: one per CPU core); for a cluster
# elsewhere: python -m grader grade --scheduler tcp://HOST:8786 (solutions/README.md).
WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
grade: $(DEV_STAMP)
	$(BIN)/python -m grader grade --workers $(WORKERS)

release: $(DEV_STAMP)
	$(BIN)/python -m grader release

references: $(DEV_STAMP)
	$(BIN)/python -m grader references

serve:
	$(BIN)/python -m http.server -d _build/html 8000

# lab/overrides.json holds the course's JupyterLab defaults: double-clicking a chapter
# (MyST .md) opens it as a notebook (jupytext). They are defaults only: the learner's
# own settings still win and nothing is written to their Jupyter folders.
# tests/e2e/test_browser_lab.py starts its server with these flags (`make -n lab`).
LAB_FLAGS := "--LabApp.app_settings_dir=$(CURDIR)/lab"
lab: $(STAMP)
	$(BIN)/jupyter lab $(LAB_FLAGS)

# pip freeze of the CI environment (Linux x86_64). Lines with an environment marker
# (`; sys_platform == ...`) pin what other platforms install instead; freeze cannot
# see them, so they are kept from the current file (edit them by hand) and freeze's
# lines for the same packages are dropped. tests/book/test_requirements.py checks it.
MARKED = $(shell grep -E '^[^#].*;' constraints.txt | sed -E 's/[=<>!~; ].*//; s/[-_.]+/[-_.]/g' | paste -sd'|' -)
constraints: $(DEV_STAMP)
	{ echo "# Full resolved environment tested by CI (pip freeze, Python 3.11, linux x86_64),"; \
	  echo "# then the pins of other platforms (with markers; kept by hand)."; \
	  echo "# Regenerate with: make constraints"; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' \
	    | grep -viE '^($(MARKED))=='; \
	  grep -E '^[^#].*;' constraints.txt; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf _build .pytest_cache .hypothesis classroom/node_modules
