# The two set-up commands of a fresh machine: `make run` (the app) and `make test` (the tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch for "This computer". The pinned release installs the CPU build where it is cached (as on CI);
# `make run TORCH=torch` takes the newest build for your machine (CUDA on Linux with NVIDIA GPUs).
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: run demo test test-deps bench gpu-check system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.stamp-app: pyproject.toml | $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[local]"
	touch $@

$(VENV)/.stamp-test: pyproject.toml $(VENV)/.stamp-app
	$(PY) -m pip install -q -e ".[local,test,bench]"
	touch $@

# The X11 libraries Qt's xcb plugin needs: installed when root or passwordless sudo allows, else the command is
# printed (and skipped on Wayland and with QT_QPA_PLATFORM=offscreen/wayland); the app starts either way.
run: $(VENV)/.stamp-app
	@$(PY) -m ddpgui.ui.platform_check --install
	$(PY) -m ddpgui

demo: $(VENV)/.stamp-app
	$(PY) -m ddpgui launch local --workload mlp --nproc 2 --steps 200 --precision bf16 --compile off --follow

# On a machine with an NVIDIA GPU: NCCL DDP, NVML telemetry and the host monitor, fp32/tf32/fp16/bf16, compile
# default and max-autotune, inference fp32/fp16/bf16/int8 and MFU, under 8 minutes, one JSON file ($$OUT/gpu_check.json,
# else .bench/gpu_check.json). It needs only a Python with torch (the venv's when there is one): a bare GPU image runs it.
GPU_PY := $(shell test -x $(PY) && echo $(PY) || echo python3)
gpu-check:
	$(GPU_PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

system-deps:
	@bash .ci/system-deps

# The suite on TEST_WORKERS processes (pytest-xdist, whole test files to each: a module's fixtures are made once;
# most tests wait on torchrun, sshd or Slurm; a third worker on CI's two cores was measured no faster: the runs' own
# detached processes fill the cores), then the tests
# marked `last` (the scan for leaked secrets) in a session of their own that sees every file the first one wrote.
# Files go to the workers longest first, as tests/conftest.py orders them (--no-loadscope-reorder keeps that order).
# The system packages (apt) and the venv (pip) install side by side: neither waits on the other.
TEST_WORKERS ?= 2
# Bytecode is written, to a cache in the venv, even where the environment says not to (PYTHONDONTWRITEBYTECODE=1,
# as on CI): the suite starts ~1,000 Python processes (the CLI, the runner, pytest's workers rewriting every test
# module's asserts), each of which otherwise compiled what it imports from source again (a third of the CPU of a
# CLI-heavy test file).  A prefix, not __pycache__ beside the sources: user scripts the tests run in place from
# tests/fixtures stay as they are.
TEST_PYC := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$(CURDIR)/$(VENV)/pycache"
test-deps:
	@bash .ci/system-deps & sysdeps=$$!; \
	$(MAKE) --no-print-directory $(VENV)/.stamp-test; venv=$$?; \
	wait $$sysdeps; sys=$$?; \
	if [ $$sys -ne 0 ]; then exit $$sys; fi; exit $$venv

test: test-deps
	$(VENV)/bin/ruff check .
	@root=$$(mktemp -d /tmp/ddpgui-tests-XXXXXX); \
	echo "$(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m 'not last' $(PYTEST_ARGS)"; \
	$(TEST_PYC) DDPGUI_TEST_ROOT=$$root $(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not last" --basetemp=$$root/tmp $(PYTEST_ARGS); \
	rc=$$?; \
	echo "$(PY) -m pytest -ra -m last"; \
	$(TEST_PYC) DDPGUI_TEST_ROOT=$$root DDPGUI_TEST_TMP=$$root/tmp $(PY) -m pytest -ra -m last; \
	last=$$?; rm -rf $$root; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$last

bench: $(VENV)/.stamp-test
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
