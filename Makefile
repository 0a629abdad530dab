# camit — everything a fresh Debian machine (as root) needs, in one place.
#   make test   install, bring up a 4-host lab, run every test, tear the lab down
#   make demo   install, bring up the lab, run the main job on it (lab stays up: make lab-down)

PYTHON     ?= python3
LAB_HOSTS  ?= 4
LAB_NAME   ?= camit
LAB_ENV    ?= env/lab.yaml
PYTEST_ARGS ?=
APT_PKGS   := openssh-server makeself gdb iproute2 chromium groovy default-jre-headless
SUITE_ENV  ?= env/lab-suite.yaml
ARTIFACTS  ?= build/artifacts


.PHONY: install deps-apt deps-pip lab-up lab-down lab-status lint test test-unit test-integration demo clean schema

install: deps-apt deps-pip

deps-apt:
	@missing=""; \
	command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v makeself >/dev/null 2>&1 || missing="$$missing makeself"; \
	command -v gdb >/dev/null 2>&1 || missing="$$missing gdb"; \
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
	@$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -e '.[test]' torch==2.13.0

lab-up: install
	$(PYTHON) -m framework.lab up --hosts $(LAB_HOSTS) --name $(LAB_NAME) --env-out $(LAB_ENV)

lab-down:
	$(PYTHON) -m framework.lab down --name $(LAB_NAME)

lab-status:
	$(PYTHON) -m framework.lab status --name $(LAB_NAME)

# static contracts: types (mypy, configured in pyproject.toml) and lint (ruff, likewise)
lint: install
	$(PYTHON) -m mypy
	$(PYTHON) -m ruff check .

test-unit: install
	$(PYTHON) -m pytest tests/unit -q $(PYTEST_ARGS)

# the lab is torn down whatever the tests did; the tests' status is the target's.
# One process on purpose (no -n in PYTEST_ARGS): lab tests stop sshd, fill a workdir, take a link down
# or switch core_pattern on the shared lab hosts; the -n behaviour is tested inside them, on lab shares.
test: install lint
	@$(MAKE) --no-print-directory lab-up || { $(MAKE) --no-print-directory lab-down; exit 1; }; \
	CAMIT_LAB_ENV=$(LAB_ENV) $(PYTHON) -m pytest tests -q -ra $(PYTEST_ARGS); rc=$$?; \
	$(MAKE) --no-print-directory lab-down || rc=1; \
	exit $$rc

# the main job on the lab: preflight, stand-in artifacts built and deployed, the CAM suite at 4 ranks
demo: lab-up
	camit check --env $(LAB_ENV)
	$(PYTHON) -m framework.artifacts build --out $(ARTIFACTS) --env-in $(LAB_ENV) --env-out $(SUITE_ENV)
	$(PYTHON) -m pytest suites/cam --env $(SUITE_ENV) --world-sizes 4 -q -rs -p no:cacheprovider
	@echo "lab is still up: 'make lab-down' removes it; the report folder is reports/latest/"

schema:
	$(PYTHON) -m framework.config schema > env/test_env.schema.json

clean:
	rm -rf build dist *.egg-info .pytest_cache reports $(SUITE_ENV)
