# Every target sets up what it needs from scratch: a virtualenv in .venv with pinned packages.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Terraform checks: python-hcl2 in .venv (the tests parse terraform/ with it); checkov in its own
# virtualenv, since its pins clash with constraints.txt.
HCL_STAMP := $(VENV)/.tools-installed
TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.installed

.PHONY: venv tools browser rewrites test test-roles faults demo bench bench-control bench-bound package checkov clean

venv: $(STAMP)

# uv (requirements-uv.txt) installs the pinned files into a virtualenv: 24 s where pip took 80 s from an
# empty cache on 2 cores (2026-12-02). Both compile the byte code at install, as they must: where
# PYTHONDONTWRITEBYTECODE is set (as on the machines Zen is built on), every process would compile each
# module it imports anew (the suite took 770 s instead of 540 s). Where uv cannot run or reach the index,
# pip installs the same files. docs/how-to/test.md has the times.
UV := $(BIN)/uv
install = UV_NATIVE_TLS=1 $(UV) pip install --quiet --compile-bytecode --python $(1) $(2) \
	|| $(1) -m pip install --quiet $(2)

$(UV): requirements-uv.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements-uv.txt || true
	test -x $(UV) || { printf '#!/bin/sh\nexit 1\n' >$(UV) && chmod +x $(UV); }
	touch $(UV)

$(STAMP): $(UV) requirements.txt requirements-agent.txt requirements-functions.txt requirements-dev.txt constraints.txt pyproject.toml
	$(call install,$(BIN)/python,-r requirements-dev.txt -c constraints.txt)
	$(call install,$(BIN)/python,--no-deps -e .)
	touch $(STAMP)

tools: $(HCL_STAMP) $(TOOLS_STAMP)

$(HCL_STAMP): $(STAMP) requirements-tools.txt
	$(call install,$(BIN)/python,-r requirements-tools.txt -c constraints.txt)
	touch $(HCL_STAMP)

$(TOOLS_STAMP): $(UV) requirements-checkov.txt
	test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(call install,$(TOOLS_VENV)/bin/python,-r requirements-checkov.txt)
	touch $(TOOLS_STAMP)

# The console's browser tests (tests/console) drive the system's Chromium through Playwright, and the job list's
# collation test (tests/test_listing_collation.py) compiles glibc's en_US locale (Cloud SQL's default collation)
# from Debian's locales data: each installed from Debian's packages when missing (CI runs as root), else left
# alone. Where one cannot be installed (no root, no Debian mirror) the tests run without it and its test says why
# it is skipped.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
		|| (DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) \
		|| echo "make: chromium could not be installed: the console's browser test will be skipped"
	@test -f /usr/share/i18n/locales/en_US || DEBIAN_FRONTEND=noninteractive apt-get install -y -q locales \
		|| (DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q locales) \
		|| echo "make: Debian's locales could not be installed: the job list's en_US collation test will be skipped"

# The tests include tests/terraform: the wiring of terraform/, the package, and checkov. Six
# pytest-xdist workers, a test file each at a time: most tests wait on subprocesses, Postgres and
# Pub/Sub, so six share two cores well (on 2 cores, 2026-12-06, in one fresh clone: 486 s of tests with
# six, 510 s with five; docs/how-to/test.md). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 6
# Whole files to each worker, in the order tests/conftest.py gives them (the longest first).
XDIST = --dist loadfile --no-loadscope-reorder
# `make test` alone sets up its two virtualenvs side by side (39 s in a fresh clone on 2 cores from empty
# caches); only then, so no other goal builds .venv beside it.
ifeq ($(MAKECMDGOALS),test)
MAKEFLAGS += -j2
endif
test: venv tools browser rewrites
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) $(XDIST)) $(PYTEST_ARGS)

# Zen's byte code, and pytest's rewrite of each test module's asserts, cached before the workers start (beside
# checkov's and Chromium's installs, under make test's -j2): each of the workers collects every test
# module, and rewrote each anew where PYTHONDONTWRITEBYTECODE is set (4 workers collecting: 49 s of CPU
# from an empty cache, 27 s from this one, which costs 14 s once; 2 cores, 2026-12-02).
rewrites: $(STAMP) $(HCL_STAMP)
	$(BIN)/python -m compileall -q -j 2 shared functions tests benchmarks
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider >/dev/null

# The function tests again with each Zen entry point's statements run as its function's database role
# (migration 0030, tests/role_support.py): a statement a role lacks a grant for fails the test, even
# one Zen only logs (a scaling pass's). About 2.5 minutes on 2 cores (138 s of tests, 2026-12-01).
test-roles: venv
	ZEN_TEST_AS_ROLES=1 $(BIN)/python -m pytest -q -n 2 $(XDIST) tests/test_*.py tests/scaling tests/sim $(PYTEST_ARGS)

# The fault suite at its full budget (10,000+ hostile messages through the functions, 4 concurrent
# deliveries, duplicated and reordered delivery, a database restart mid-burst): one line per check.
faults: venv
	$(BIN)/python -m tests.faults --budget full

demo: venv
	$(BIN)/zen demo $(DEMO_ARGS)

# Simulator benchmark: zen against the baselines on fixed scenarios (ratios, not timings).
bench: venv
	$(BIN)/python -m zen_dev.sim.bench

# Control-plane benchmark: submits, heartbeats (and the tick) against the raw database anchor, same run.
bench-control: venv
	$(BIN)/python -m benchmarks.control

# The least waste any policy pays at light load while as fast as ask-every-region (issue 11), the gangs'
# idle bound (issue 37), then issue 33's: the earliest starts where a cluster's places bind, and the least
# dollars over the price floor at its speed targets (an LP; SciPy from requirements-dev.txt).
bench-bound: venv
	$(BIN)/python -m benchmarks.bound

# What terraform deploys: dist/zen-functions.zip, the agent wheel, dist/manifest.json.
# Ship a configuration of your own with: make package CONFIG=zen.yaml
package: venv
	$(BIN)/python scripts/package.py --out dist $(if $(CONFIG),--config $(CONFIG))

checkov: $(TOOLS_STAMP)
	$(TOOLS_VENV)/bin/checkov -d terraform --config-file terraform/.checkov.yaml

clean:
	rm -rf $(VENV) $(TOOLS_VENV) .zen dist
