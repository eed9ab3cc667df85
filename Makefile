# Set-up on a fresh machine: both targets create .venv and install everything, on Linux or
# macOS with Python >= 3.10 (3.11 or later preferred: spikingjelly, a peer in
# benchmarks/bench_run.py, and elasticai.creator 0.66.0 need it and are left out on 3.10).
# torch is not pinned, and any build will do; the first of these that applies gives it:
#  - TORCH_SPEC and/or TORCH_INDEX, when given: `pip install $(TORCH_SPEC)` from that index,
#    e.g. `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu` for the small CPU build
#    (PyTorch's install selector on pytorch.org gives the index of each build);
#  - the torch .venv already has;
#  - a torch that $(PYTHON) already imports (a CUDA, ROCm or CPU build; system, conda or
#    virtual environment): .venv gets a .pth file naming the site-packages that holds it, so
#    that torch is used as it is, nothing is downloaded, and .venv's own packages come first
#    (`python -m venv --system-site-packages` would miss a torch in a virtual environment);
#  - a torch wheel that pip's own configuration offers without an index (find-links: a
#    wheelhouse, as on this project's CI machines, where it is the CPU build);
#  - else the platform's default build, `pip install torch` (on Linux x86_64 that is the
#    CUDA build, several GB; on macOS the CPU/MPS build).
# The set-up prints which torch it found; nothing checks for one build.
# norse and spikingjelly go in with --no-deps because they declare torchvision, which
# would pull a second, CUDA build of torch (spikingjelly's one other import, loguru, is
# named); neurobench 2.3.0, which tests/test_metrics.py measures nirbridge's metrics
# against, too (it declares torchaudio and tonic, which its metrics and Benchmark do
# not import); elasticai.creator 0.66.0 goes in with --no-deps as well (it declares hardware
# simulation packages the IR does not use), after tomlkit and pyserial, which it does
# use (click is already a nirbridge dependency): installed last, --no-deps packages
# leave pip nothing to report about their undeclared dependencies.
# `make test` also makes the peers of `nirbridge conformance`, sinabs, rockpool and spyx, each
# in a virtualenv of its own under .venv-peers (`make peers`, about 1.7 min and 3.1 GB here;
# `make conformance` writes the report to build/conformance). And it makes a second
# virtualenv, .venv312, for elasticai.creator 0.68.0 (its current release), which needs
# Python >= 3.12: the first of python3.12 and python3.13 on
# PATH, else in pyenv's versions (PYTHON312=/path/to/python names one). It holds the newest
# torch pip's index serves, nirbridge, 0.68 and everything else the tests use, and runs the
# suite a second time there (tests/test_elasticai_068.py instead of 0.66's
# tests/test_elasticai.py), so that what users of current torch meet is tested: all but
# the tests that do not depend on torch's version and take minutes (SUITE312_SKIP: the
# docs build, the command line's processes, the conformance peers in their own
# virtualenvs), to keep `make test` within CI's time. Its torch comes from pip's index
# (TORCH_SPEC/TORCH_INDEX apply too): on Linux x86_64 the CUDA build, about 4.7 GB and
# 1.5 minutes on this project's CI machines; once made, it is reused until pyproject.toml
# or this Makefile changes.
# The tests also need two programs: Chromium, for the headless check of the built docs,
# and graphviz's dot, for `nirbridge draw`; `tools` installs them when they are missing,
# with apt-get (as root, or through sudo) or, on macOS, Homebrew.
# `make notebooks` starts JupyterLab in .venv on the notebooks (installing it the first
# time; --allow-root when run as root; NOTEBOOK_ARGS for more, e.g. --no-browser); it is
# not part of `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo
TORCH_STAMP := $(VENV)/.torch
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TORCH_SPEC ?=
TORCH_INDEX ?=
TORCH_PTH := nirbridge-torch-from-python.pth
PYTHON312 ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3.12 \
	$$HOME/.pyenv/versions/3.13*/bin/python3.13; do "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
	2>/dev/null && { command -v "$$c"; break; }; done)
VENV312 := .venv312
PY312 := $(VENV312)/bin/python
STAMP312 := $(VENV312)/.installed
PEERS_DIR := .venv-peers
PEER_STAMPS := $(PEERS_DIR)/sinabs/.installed $(PEERS_DIR)/rockpool/.installed $(PEERS_DIR)/spyx/.installed
NOTEBOOK_ARGS ?=

.PHONY: demo test docs tools bench lint notebooks clean peers conformance

# .venv with torch in it (tests/test_packaging.py makes one from a Python that has torch)
$(TORCH_STAMP): Makefile
	@$(PYTHON) -c 'import sys' 2>/dev/null || { \
		echo "cannot run '$(PYTHON)' (not found, or a pyenv shim of a version that is not active):" \
			"make PYTHON=/path/to/python3.11 ..." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { \
		echo "nirbridge needs Python >= 3.10; $(PYTHON) is $$($(PYTHON) -V 2>&1):" \
			"make PYTHON=/path/to/python3.11 ..." >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@set -e; \
	site="$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \
	rm -f "$$site/$(TORCH_PTH)"; \
	if [ -n "$(TORCH_SPEC)$(TORCH_INDEX)" ]; then \
		echo "torch: pip install $(or $(TORCH_SPEC),torch) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))"; \
		$(PIP) install -q '$(or $(TORCH_SPEC),torch)' $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)'); \
	elif $(PY) -c 'import torch' 2>/dev/null; then \
		echo "torch: already in $(VENV)"; \
	elif torch_site="$$($(PYTHON) -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)"; then \
		echo "torch: $(PYTHON)'s, from $$torch_site"; \
		echo "$$torch_site" > "$$site/$(TORCH_PTH)"; \
	elif $(PIP) install -q --no-index --no-deps 'torch>=2.1' 2>/dev/null; then \
		echo "torch: a wheel from pip's find-links"; \
		$(PIP) install -q torch; \
	else \
		echo "torch: pip install torch (the platform's default build)"; \
		$(PIP) install -q torch; \
	fi
	@# numpy comes with nirbridge, after this: torch would warn that it cannot find it
	$(PY) -W "ignore:Failed to initialize NumPy" -c "import torch; print(f'torch {torch.__version__} (CUDA {torch.version.cuda}) from {torch.__file__}')"
	touch $(TORCH_STAMP)

# what `make demo` needs: nirbridge and matplotlib (its raster plot), nothing else
$(DEMO_STAMP): $(TORCH_STAMP) pyproject.toml Makefile
	$(PIP) install -q -e ".[plot]"
	touch $(DEMO_STAMP)

# everything the tests use, on top: the simulators, Triton, nirtorch, the docs' tools
$(STAMP): $(DEMO_STAMP)
	$(PIP) install -q -e ".[dev,snntorch,spikingjelly]" tomlkit pyserial
	$(PIP) install -q --no-deps norse==1.1.0 neurobench==2.3.0
	@if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
		set -ex; \
		$(PIP) install -q --no-deps spikingjelly==2.0.0; \
		$(PIP) install -q --no-deps elasticai.creator==0.66.0; \
		$(PY) -c "import spikingjelly.activation_based, elasticai.creator.torch2ir"; \
	else \
		echo "Python 3.10: spikingjelly 2.0.0 and elasticai.creator 0.66.0 need 3.11, left out"; \
	fi
	$(PY) -c "import torch, nir, norse, snntorch, nirtorch, neurobench.benchmarks"
	touch $(STAMP)

# elasticai.creator 0.68 beside Python >= 3.12 (see the top)
$(STAMP312): pyproject.toml Makefile
	@[ -n "$(PYTHON312)" ] || { echo "elasticai.creator 0.68's tests (tests/test_elasticai_068.py) need" \
		"Python >= 3.12, and none was found on PATH or in pyenv; install one, or name it:" \
		"make test PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv --clear $(VENV312)
	$(if $(TORCH_SPEC)$(TORCH_INDEX),$(PY312) -m pip install -q --disable-pip-version-check \
		'$(or $(TORCH_SPEC),torch)' $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)'))
	$(PY312) -m pip install -q --disable-pip-version-check -e ".[dev,snntorch,spikingjelly,elasticai]"
	$(PY312) -m pip install -q --disable-pip-version-check --no-deps norse==1.1.0 neurobench==2.3.0 spikingjelly==2.0.0
	$(PY312) -W ignore::FutureWarning -c "import sys, torch, norse, snntorch, spikingjelly.activation_based, elasticai.creator.torch2ir; \
		print(f'.venv312: Python {sys.version.split()[0]}, torch {torch.__version__}')"
	touch $(STAMP312)

# the peers of `nirbridge conformance`, each in its own virtualenv under .venv-peers (sinabs
# 3.1.3 and rockpool 3.1.0 read files only with nir 1.0.4; spyx needs JAX). torch comes as
# .venv's does when pip installs it: TORCH_SPEC/TORCH_INDEX, else a wheel pip's find-links
# offers (the CPU build on this project's CI machines), else the platform's default; JAX
# is the CPU build
define peer_torch
	@if [ -n "$(TORCH_SPEC)$(TORCH_INDEX)" ]; then \
		$(1) -m pip install -q --disable-pip-version-check '$(or $(TORCH_SPEC),torch)' $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)'); \
	elif $(1) -m pip install -q --disable-pip-version-check --no-index --no-deps 'torch>=2.1' 2>/dev/null; then \
		$(1) -m pip install -q --disable-pip-version-check torch; \
	else \
		$(1) -m pip install -q --disable-pip-version-check torch; \
	fi
endef

$(PEERS_DIR)/sinabs/.installed: Makefile
	$(PYTHON) -m venv --clear $(PEERS_DIR)/sinabs
	$(call peer_torch,$(PEERS_DIR)/sinabs/bin/python)
	$(PEERS_DIR)/sinabs/bin/python -m pip install -q --disable-pip-version-check sinabs==3.1.3 nir==1.0.4 h5py
	touch $@

$(PEERS_DIR)/rockpool/.installed: Makefile
	$(PYTHON) -m venv --clear $(PEERS_DIR)/rockpool
	$(call peer_torch,$(PEERS_DIR)/rockpool/bin/python)
	$(PEERS_DIR)/rockpool/bin/python -m pip install -q --disable-pip-version-check rockpool==3.1.0 nir==1.0.4 'nirtorch<2.0.3' h5py
	touch $@

$(PEERS_DIR)/spyx/.installed: Makefile
	$(PYTHON) -m venv --clear $(PEERS_DIR)/spyx
	$(PEERS_DIR)/spyx/bin/python -m pip install -q --disable-pip-version-check spyx==1.0.0 'jax[cpu]==0.10.2' flax==0.12.8 h5py
	touch $@

peers: $(PEER_STAMPS)

# the conformance report of the example files and the pack, against every simulator
conformance: $(STAMP) $(PEER_STAMPS)
	@mkdir -p build/conformance
	$(VENV)/bin/nirbridge conformance tests/data/nir-examples/*.nir --pack \
		--json build/conformance/report.json --html build/conformance/report.html

demo: $(DEMO_STAMP)
	$(PY) -m nirbridge.demo

tools:
	@if command -v dot >/dev/null && { command -v chromium || command -v chromium-browser || \
		[ -x /Applications/Chromium.app/Contents/MacOS/Chromium ]; } >/dev/null; then :; \
	elif command -v apt-get >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium graphviz; \
	elif command -v brew >/dev/null; then \
		command -v dot >/dev/null || brew install graphviz; \
		[ -x /Applications/Chromium.app/Contents/MacOS/Chromium ] || brew install --cask chromium; \
	else \
		echo "install Chromium and Graphviz (dot) with this system's package manager" >&2; exit 1; \
	fi

SUITE312_SKIP := --ignore=tests/test_docs.py --ignore=tests/test_cli.py \
	--ignore=tests/test_conformance.py --ignore=tests/test_conformance_workers.py

test: $(STAMP) $(STAMP312) $(PEER_STAMPS) tools
	$(PY) -m pytest -q
	$(PY312) -m pytest -q $(SUITE312_SKIP)

docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir build/site

notebooks: $(STAMP)
	@$(PY) -c "import jupyterlab" 2>/dev/null || $(PIP) install -q jupyterlab
	cd notebooks && JUPYTER_PLATFORM_DIRS=1 $(abspath $(VENV))/bin/jupyter lab \
		$(if $(SUDO),,--allow-root) $(NOTEBOOK_ARGS)

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
	rm -rf $(VENV) $(VENV312) $(PEERS_DIR) build *.egg-info
