# One command to run, one to test (see README). Everything installs into .venv in the repo root.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | sha1sum | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 8000
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: install run test test-fast bench bench-load bench-ops migrate clean

$(STAMP): requirements.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=python3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py rag reindex --if-changed
	@echo ""
	@echo "  Serving on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/, Ctrl-C stops)"
	@echo ""
	@mkdir -p $${RAG_DATA_DIR:-data}/celery
	@trap 'kill $$WORKER 2>/dev/null' EXIT INT TERM; \
	$(VENV)/bin/celery -A ragsite worker --beat --schedule=$${RAG_DATA_DIR:-data}/celery/beat-schedule --loglevel=warning --concurrency=1 & WORKER=$$!; \
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) ragsite.asgi:application

test: install
	$(VENV)/bin/pytest

test-fast: install
	$(VENV)/bin/pytest -m "not slow"

bench: install
	$(PY) bench/retrieval.py

bench-load: install
	$(PY) bench/load.py

bench-ops: install
	$(PY) bench/ops.py

clean:
	rm -rf $(VENV)
