# As the harness's: reads the controller's /etc at import; camit's shim must win over it.
with open("/etc/ubus_ci/test_env.yaml", encoding="utf-8") as load_f:
    CONF = load_f.read()
