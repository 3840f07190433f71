# One command to run, one to test (see README). Everything installs into .venv in the repo root.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | sha1sum | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 8000
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: install test-tools run prod test test-fast test-clock test-loaded bench bench-formats bench-versions bench-sync bench-load bench-scale bench-ops bench-gaps bench-cli bench-soak migrate clean

$(STAMP): requirements.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=python3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

# The MCP Inspector's CLI for the tests (package.json; `make test` needs Node.js): its install scripts are not run.
node_modules/.package-lock.json: package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm not found: install Node.js (the MCP Inspector test needs it)" >&2; exit 1; }
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error

install: $(STAMP)

test-tools: node_modules/.package-lock.json

migrate: install
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py rag reindex --if-changed --background
	@echo ""
	@echo "  Serving on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/, Ctrl-C stops)"
	@echo ""
	@mkdir -p $${RAG_DATA_DIR:-data}/celery
	@trap 'kill $$WORKER 2>/dev/null' EXIT INT TERM; \
	$(VENV)/bin/celery -A ragsite worker --beat --schedule=$${RAG_DATA_DIR:-data}/celery/beat-schedule --loglevel=warning --concurrency=1 & WORKER=$$!; \
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) ragsite.asgi:application

# The production stack on this machine's PostgreSQL and Redis (override DATABASE_URL, REDIS_URL, RAG_DATA_DIR):
# the Procfile under honcho, 2 Daphne processes on one socket, a Celery worker and beat. Ctrl-C stops them all.
# MCP runs without sessions there: a session lives in one process, and the kernel hands a request to either.
# CG_RAG's routes need an API key there (RAG_CGRAG_REQUIRE_KEY): they spend model tokens.
PROD_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/rag
PROD_REDIS_URL ?= redis://127.0.0.1:6379/0
prod: install
	@export DATABASE_URL="$${DATABASE_URL:-$(PROD_DATABASE_URL)}" REDIS_URL="$${REDIS_URL:-$(PROD_REDIS_URL)}"; \
	export CELERY_BROKER_URL="$${CELERY_BROKER_URL:-$$REDIS_URL}" CELERY_RESULT_BACKEND="$${CELERY_RESULT_BACKEND:-$$REDIS_URL}"; \
	export RAG_DATA_DIR="$${RAG_DATA_DIR:-$(CURDIR)/data/prod}" RAG_EMBEDDING_THREADS="$${RAG_EMBEDDING_THREADS:-1}"; \
	export RAG_MCP_STATELESS="$${RAG_MCP_STATELESS:-true}" RAG_CGRAG_REQUIRE_KEY="$${RAG_CGRAG_REQUIRE_KEY:-true}"; \
	export PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HOST="$(HOST)" PORT="$(PORT)"; \
	mkdir -p "$$RAG_DATA_DIR/celery" && $(PY) -m ragsite.createdb && $(PY) manage.py migrate --noinput -v0 && \
	$(PY) manage.py collectstatic --noinput -v0 && $(PY) manage.py rag reindex --if-changed --background && \
	exec $(VENV)/bin/honcho start -f Procfile -p "$(PORT)"

# The tests run in PYTEST_WORKERS processes (pytest-xdist; each has its own data folder and test database): the
# fast ones first, then the slow end-to-end ones (live servers, Celery workers on private queues, browsers), each
# module's tests in one process (`--dist loadfile`: a module's servers are started once).
PYTEST_WORKERS ?= 2

test: install test-tools
	$(VENV)/bin/pytest -m "not slow" -n $(PYTEST_WORKERS) && $(VENV)/bin/pytest -m slow -n $(PYTEST_WORKERS) --dist loadfile

test-fast: install test-tools
	$(VENV)/bin/pytest -m "not slow" -n $(PYTEST_WORKERS)

# The whole suite on a loaded machine (issue 28): 3 CPU-burning processes per core run beside it (.ci/loaded.py;
# LOADED_PER_CORE changes that), since CI runs on a machine like this one, often busy. Extra pytest arguments:
# LOADED_PYTEST. Not part of CI: a check of the suite's own robustness, run after changing live or timing tests.
LOADED_PYTEST ?=

test-loaded: install test-tools
	$(PY) .ci/loaded.py -- $(VENV)/bin/pytest $(LOADED_PYTEST)

# The whole suite with the wall clock at each local time of CLOCK_TIMES on CLOCK_DAY (in CLOCK_TZ), one run after
# another. Debian's libfaketime shifts the wall clock of pytest and of the servers and workers it starts by one
# offset and lets it tick (.ci/clock/sitecustomize.py works around its broken sleep; Chromium keeps the real
# clock). The day is near the real one (sign-in cookies last two weeks). Extra pytest arguments: CLOCK_PYTEST.
CLOCK_TZ ?= $(or $(DJANGO_TIME_ZONE),Asia/Shanghai)
CLOCK_DAY ?= tomorrow
CLOCK_TIMES ?= 00:30 04:00 23:59
CLOCK_PYTEST ?=

test-clock: install test-tools
	@command -v faketime >/dev/null 2>&1 || { echo "faketime not found (Debian: apt-get install faketime)" >&2; exit 1; }
	@failed=""; for at in $(CLOCK_TIMES); do \
	  started=$$(date +%s); target=$$(TZ=$(CLOCK_TZ) date -d "$(CLOCK_DAY) $$at" +%s) || exit 2; \
	  echo "== make test-clock: the suite at $$(TZ=$(CLOCK_TZ) date -d @$$target '+%F %H:%M %Z') ($(CLOCK_TZ))"; \
	  TZ=$(CLOCK_TZ) FAKETIME_DONT_FAKE_MONOTONIC=1 PYTHONPATH=$(CURDIR)/.ci/clock$${PYTHONPATH:+:$$PYTHONPATH} \
	    faketime -f "$$(printf '%+d' $$((target - started)))s" $(VENV)/bin/pytest $(CLOCK_PYTEST) || failed="$$failed $$at"; \
	  echo "== make test-clock: the run at $$at took $$(( $$(date +%s) - started )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test-clock: failed at$$failed ($(CLOCK_TZ))" >&2; exit 1; fi

bench: install
	$(PY) bench/retrieval.py
	$(PY) bench/cli.py
	$(PY) bench/confidence.py
	$(PY) bench/answers.py

# Real API references as their generators wrote them (Debian's Sphinx, Javadoc, Doxygen and gtk-doc packages; TypeDoc,
# JSDoc and a Markdown site generated from npm and PyPI): read, built and asked (bench/formats/bench.py).
# BENCH_FORMATS_ARGS="--refs click,cairo" narrows it; the references are laid out under data/bench-formats.
bench-formats: install
	bash bench/formats/prepare.sh $${RAG_DATA_DIR:-data}/bench-formats
	$(PY) bench/formats/bench.py $(BENCH_FORMATS_ARGS)

# Three SDK versions side by side (issue 32): the English corpus and two scripted releases made from it; the
# versions' build cost against a cold build, the diff's precision and recall, latency and memory with 1 and 3 open.
bench-versions: install
	$(PY) bench/versions.py

# Syncing from where docs live (issue 30): a git source (the English corpus) and a website (Click's HTML reference,
# prepared by bench/formats/prepare.sh): cold build, no-change sync and an edit of 5 pages, timed in one run.
bench-sync: install
	bash bench/formats/prepare.sh $${RAG_DATA_DIR:-data}/bench-formats
	$(PY) bench/sync.py

bench-load: install
	$(PY) bench/load.py

# Synthetic knowledge bases of 100k and 1M chunks (docs/en/scaling.md); BENCH_SCALE_ARGS="--sizes 10000,100000" is quick.
bench-scale: install
	$(PY) bench/scale.py $(BENCH_SCALE_ARGS)

# Overload and soak (issue 28): mixed traffic at the measured saturation rate for 10 minutes, without and then with 5%
# hostile requests, on 2 Daphne processes; locust in its own virtualenv (.venv-bench, requirements-bench.txt).
# BENCH_SOAK_ARGS="--minutes 2" is quick.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: requirements-bench.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r requirements-bench.txt
	touch $@

bench-soak: install $(BENCH_VENV)/.installed
	$(PY) bench/soak.py $(BENCH_SOAK_ARGS)

# Coverage gaps over a replayed log of ../shared/golden, searched over the corpora `make bench` built (run it
# first): grouping purity per half, groups to read for 90% of the unanswered requests, the job's time.
bench-gaps: install
	$(PY) bench/gaps.py $(BENCH_GAPS_ARGS)

bench-ops: install
	$(PY) bench/ops.py

bench-cli: install
	$(PY) bench/cli.py

clean:
	rm -rf $(VENV)
