# The miniature's own BaseTest stands where the harness's does; camit's must win over it.
raise ImportError("the miniature's ubus_test.base_test was imported: camit's shim did not win")
