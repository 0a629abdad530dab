# camit — everything a fresh Debian machine (as root) needs, in one place.
#   make test   install, bring up the CPU, emulated A3/A2 and jump-host labs, run every test, tear them all down
#   make demo   install, bring up an emulated A3 lab, run the main job on it (lab stays up: make lab-down)

PYTHON     ?= python3
LAB_HOSTS  ?= 4
LAB_NAME   ?= camit
LAB_ENV    ?= env/lab.yaml
# LAB_NPU=a2|a3 makes lab-up bring up emulated Ascend hosts (empty: CPU hosts, gloo)
LAB_NPU    ?=
LAB_VISIBLE ?=
LAB_SUBNET ?= 10.77.0.0/24
# the emulated A3 lab `make test` brings up beside the CPU lab (4 hosts: world 8 at two visible dies a host)
NPU_LAB_NAME   ?= camitnpu
NPU_LAB_HOSTS  ?= 4
NPU_LAB_SUBNET ?= 10.78.0.0/24
NPU_LAB_ENV    ?= env/lab-npu.yaml
# the emulated A2 lab (8 x 910B a host) for the A2-only paths: A3-only skips, device-NIC pings
A2_LAB_NAME    ?= camita2
A2_LAB_SUBNET  ?= 10.79.0.0/24
A2_LAB_ENV     ?= env/lab-npu-a2.yaml
# hosts only a jump namespace reaches (defaults.jump_host), for the SSH-through-a-jump lab tests
JUMP_LAB_NAME   ?= camitj
JUMP_LAB_SUBNET ?= 10.76.0.0/24
JUMP_LAB_INNER  ?= 10.176.0.0/24
JUMP_LAB_ENV    ?= env/lab-jump.yaml
PYTEST_ARGS ?=
APT_PKGS   := openssh-server makeself gdb iproute2 gcc libc6-dev chromium groovy default-jre-headless libglib2.0-dev
SUITE_ENV  ?= env/lab-suite.yaml
ARTIFACTS  ?= build/artifacts


.PHONY: docs install deps-apt deps-pip lab-up lab-down lab-status npu-lab-up npu-lab-down a2-lab-up a2-lab-down jump-lab-up jump-lab-down lint test test-unit test-integration demo clean schema

install: deps-apt deps-pip

deps-apt:
	@missing=""; \
	command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v makeself >/dev/null 2>&1 || missing="$$missing makeself"; \
	command -v gdb >/dev/null 2>&1 || missing="$$missing gdb"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v groovy >/dev/null 2>&1 || missing="$$missing groovy default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install$$missing" >&2; exit 2; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# always (re)install this checkout: an editable install of another checkout would otherwise
# be what the camit script and the pytest plugin import (quick when everything is satisfied)
deps-pip:
	@$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -e '.[test,docs]' torch==2.13.0

lab-up: install
	$(PYTHON) -m framework.lab up --hosts $(LAB_HOSTS) --name $(LAB_NAME) --subnet $(LAB_SUBNET) --env-out $(LAB_ENV) \
	  $(if $(LAB_NPU),--npu $(LAB_NPU)) $(if $(LAB_VISIBLE),--visible $(LAB_VISIBLE))

npu-lab-up: install
	$(PYTHON) -m framework.lab up --hosts $(NPU_LAB_HOSTS) --name $(NPU_LAB_NAME) --subnet $(NPU_LAB_SUBNET) \
	  --npu a3 --env-out $(NPU_LAB_ENV)

npu-lab-down:
	$(PYTHON) -m framework.lab down --name $(NPU_LAB_NAME)

a2-lab-up: install
	$(PYTHON) -m framework.lab up --hosts 2 --name $(A2_LAB_NAME) --subnet $(A2_LAB_SUBNET) --npu a2 --env-out $(A2_LAB_ENV)

a2-lab-down:
	$(PYTHON) -m framework.lab down --name $(A2_LAB_NAME)

jump-lab-up: install
	$(PYTHON) -m framework.lab up --hosts 2 --name $(JUMP_LAB_NAME) --subnet $(JUMP_LAB_SUBNET) \
	  --jump $(JUMP_LAB_INNER) --env-out $(JUMP_LAB_ENV)

jump-lab-down:
	$(PYTHON) -m framework.lab down --name $(JUMP_LAB_NAME)

lab-down:
	$(PYTHON) -m framework.lab down --name $(LAB_NAME)

lab-status:
	$(PYTHON) -m framework.lab status --name $(LAB_NAME)

# static contracts: types of framework/, tools/ and tests/ (mypy, configured in pyproject.toml), lint (ruff,
# likewise) and the branch budget
# (radon's complexity of framework/ never above tools/complexity-baseline.json; --update lowers it)
lint: install
	$(PYTHON) -m mypy
	$(PYTHON) -m ruff check .
	$(PYTHON) tools/complexity.py

test-unit: install
	$(PYTHON) -m pytest tests/unit -q $(PYTEST_ARGS)

# the clean-room second umdk_cam_op_lib (tests/cleanroom_cam): its own process, since it registers the same
# torch.ops namespace as the stand-in (standin/) that tests/unit imports
CLEANROOM ?= tests/cleanroom_cam

# the lab is torn down whatever the tests did; the tests' status is the target's.
# Two passes: the tests that reach no lab (tests/conftest.py marks the rest `lab`) on TEST_WORKERS xdist
# workers, then the lab tests in one process: they stop sshd, fill a workdir, take a link down or switch
# core_pattern on the shared lab hosts, so never two at once (the -n behaviour is tested inside them, on lab
# shares). Both passes always run; either failing fails the target.
TEST_WORKERS ?= 2
test: install lint docs
	@down() { $(MAKE) --no-print-directory lab-down LAB_NPU= ; r1=$$?; $(MAKE) --no-print-directory npu-lab-down; r2=$$?; \
	  $(MAKE) --no-print-directory a2-lab-down; r3=$$?; $(MAKE) --no-print-directory jump-lab-down; r4=$$?; \
	  [ $$r1 = 0 ] && [ $$r2 = 0 ] && [ $$r3 = 0 ] && [ $$r4 = 0 ]; }; \
	{ $(MAKE) --no-print-directory lab-up LAB_NPU= && $(MAKE) --no-print-directory npu-lab-up && \
	  $(MAKE) --no-print-directory a2-lab-up && $(MAKE) --no-print-directory jump-lab-up; } || { down; exit 1; }; \
	CAMIT_LAB_ENV=$(LAB_ENV) CAMIT_NPU_LAB_ENV=$(NPU_LAB_ENV) CAMIT_NPU_A2_LAB_ENV=$(A2_LAB_ENV) \
	CAMIT_JUMP_LAB_ENV=$(JUMP_LAB_ENV) CAMIT_JUMP_LAB_NAME=$(JUMP_LAB_NAME) sh -c '\
	  $(PYTHON) -m pytest tests -m "not lab" --ignore=$(CLEANROOM) -n $(TEST_WORKERS) -q -ra --durations=10 $(PYTEST_ARGS); r1=$$?; \
	  $(PYTHON) -m pytest $(CLEANROOM) -n $(TEST_WORKERS) -q -ra -p no:cacheprovider $(PYTEST_ARGS); r3=$$?; \
	  $(PYTHON) -m pytest tests -m lab --ignore=$(CLEANROOM) -q -ra --durations=25 $(PYTEST_ARGS); r2=$$?; \
	  echo "make test: tests without a lab rc=$$r1, clean-room library rc=$$r3, lab tests rc=$$r2"; \
	  [ $$r1 = 0 ] && [ $$r2 = 0 ] && [ $$r3 = 0 ]'; rc=$$?; \
	down || rc=1; \
	exit $$rc

# the main job, as a user sees it on an A3 cluster: two emulated A3 hosts (16 dies each, hccl; the env
# declares 2 of them visible, so world 4 runs 2 + 2 across both nodes), preflight with every NPU column, the
# stand-in artifacts built and deployed, the CAM suite at 4 ranks; then the docs, and where both are
demo: LAB_NPU = a3
demo: LAB_HOSTS = 2
demo: LAB_VISIBLE = 0,1
demo: lab-up
	camit check --env $(LAB_ENV)
	$(PYTHON) -m framework.artifacts build --out $(ARTIFACTS) --env-in $(LAB_ENV) --env-out $(SUITE_ENV)
	@$(PYTHON) -m pytest suites/cam --env $(SUITE_ENV) --world-sizes 4 -q -rs -p no:cacheprovider; rc=$$?; \
	$(MKDOCS) || rc=1; \
	$(PYTHON) -m pytest suites/cam/test_sweep.py --env $(SUITE_ENV) --world-sizes 4 -m perf --perf-matrix quick \
	  --report-dir reports/perf -q -p no:cacheprovider || rc=1; \
	echo "the report: $(CURDIR)/reports/latest/index.html (run folder reports/latest/)"; \
	echo "the docs:   $(CURDIR)/build/site/index.html"; \
	echo "the performance page (quick matrix): $(CURDIR)/reports/perf/latest/perf.html"; \
	echo "lab is still up: 'make lab-down' removes it"; exit $$rc

# the documentation site into build/site: warnings (broken links and anchors too) are errors; the reference
# pages are generated from the schema, the parsers and bench/results (docs/hooks.py); nothing is fetched
MKDOCS = NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --quiet
docs: install
	$(MKDOCS)

schema:
	$(PYTHON) -m framework.config schema > env/test_env.schema.json

clean:
	rm -rf build dist *.egg-info .pytest_cache reports $(SUITE_ENV)
