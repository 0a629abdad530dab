"""A first camit test of your own.

Run it with ``pytest examples/test_first.py --env env/lab.yaml``.
"""


def test_every_host_answers(cluster):
    results = cluster.check(["uname", "-n"])  # raises naming each host that failed
    for host, result in results.items():
        assert result.stdout.strip(), f"{host} printed no node name"
