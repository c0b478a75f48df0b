# Two commands on a fresh machine:  `make demo` (main job) and `make test` (the test suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow test-all bench bench-train clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned to the CPU build first, so nothing later pulls a CUDA wheel.
	$(BIN)/pip install -q "torch>=2.10,<2.14"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pe-probe demo --out out/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow or not slow"

bench: $(STAMP)
	$(BIN)/python analyses/benchmarks/bench_analyze.py
	$(BIN)/python analyses/benchmarks/bench_kernels.py

# training throughput (~25 min on 2 cores), the masked trainer (~4 min), malloc settings (~8 min), attention
# kernels (~30 s) and the arithmetic check (~12 min); all rewrite reports/benchmarks/
bench-train: $(STAMP)
	$(BIN)/python analyses/benchmarks/bench_train.py --rounds 3
	$(BIN)/python analyses/benchmarks/bench_masked.py
	$(BIN)/python analyses/benchmarks/bench_memory.py
	$(BIN)/python analyses/benchmarks/bench_attention.py
	$(BIN)/python analyses/benchmarks/precision_check.py

clean:
	rm -rf $(VENV) out
