# The miniature's root conftest, as the harness's: it needs /etc/ubus_ci/test_env.yaml and --timeout.
# camit blocks this file (framework.urma.harness): were it loaded, every test here would fail.
import os


def pytest_configure(config):
    with open("/etc/ubus_ci/test_env.yaml", encoding="utf-8"):
        pass
    int(config.getoption("--timeout"))
    os.environ["MINI_CONFTEST_LOADED"] = "1"
