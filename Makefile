# Set-up on a fresh machine: both targets create .venv and install everything.
# torch is installed first as the CPU build (2.13.0); norse and spikingjelly (a peer in
# benchmarks/bench_run.py) go in with --no-deps because they declare torchvision, which
# would pull a CUDA build of torch (spikingjelly's one other import, loguru, is named);
# elasticai.creator 0.66.0 goes in with --no-deps as well (it declares hardware
# simulation packages the IR does not use), after tomlkit and pyserial, which it does
# use (click is already a nirbridge dependency): installed last, --no-deps packages
# leave pip nothing to report about their undeclared dependencies.
# The tests also need two programs from Debian's packages: Chromium, for the headless
# check of the built docs, and graphviz's dot, for `nirbridge draw`; `tools` installs
# them with apt-get when they are missing (as root, or through sudo).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test docs tools bench lint clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,snntorch]" tomlkit pyserial loguru
	$(PIP) install -q --no-deps norse==1.1.0 spikingjelly==2.0.0
	$(PIP) install -q --no-deps elasticai.creator==0.66.0
	$(PY) -c "import torch, nir, norse, snntorch, nirtorch, spikingjelly.activation_based, elasticai.creator.torch2ir; assert torch.version.cuda is None, 'CUDA torch installed'"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m nirbridge.demo

tools:
	@command -v chromium >/dev/null && command -v dot >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium graphviz; }

test: $(STAMP) tools
	$(PY) -m pytest -q

docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir build/site

bench: $(STAMP)
	$(PY) benchmarks/bench_interpret.py
	$(PY) benchmarks/bench_io.py
	$(PY) benchmarks/bench_trace.py
	$(PY) benchmarks/bench_simulators.py
	$(PY) benchmarks/bench_elasticai.py
	$(PY) benchmarks/bench_run.py

lint: $(STAMP)
	$(PY) -m ruff check nirbridge tests benchmarks notebooks docs/hooks
	$(PY) -m ruff format --check nirbridge tests benchmarks notebooks docs/hooks

clean:
	rm -rf $(VENV) build *.egg-info
