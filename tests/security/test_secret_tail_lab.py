"""Issue 31 item 7 on the lab (security review 3, #11): the failed rank's log tail, which pytest's failure text
and ``camit run`` print, is scrubbed of secrets and has its control characters escaped, as the review saw it
(``^[]0;FAKE TITLE^G^[[2Jerror: token=tok-SUPERSECRET-42`` raw in the failure text)."""

from __future__ import annotations

import secrets

import pytest

from framework.config.effective import load
from framework.hosts import Cluster
from framework.launch import Launcher, Target
from framework.records.folder import RunDir

pytestmark = pytest.mark.lab
TOKEN = f"tok-{secrets.token_hex(6)}"
RANK = """\
import os, sys
if os.environ.get("RANK") == "0":
    sys.stderr.write("\\x1b]0;FAKE TITLE\\x07\\x1b[2Jerror: token=" + os.environ["API_TOKEN"] + "\\n")
    raise RuntimeError("login failed with token=" + os.environ["API_TOKEN"])  # the launch's cause line
"""


def test_the_failed_ranks_log_tail_is_scrubbed_and_escaped(env_variant, tmp_path):
    def change(doc):
        doc.setdefault("launch", {})["env"] = {"API_TOKEN": TOKEN}
    env = load(env_variant(change, "tail.yaml"))
    script = tmp_path / "rank_tail.py"
    script.write_text(RANK)
    with Cluster.from_env(env, ["host1"]) as cluster:
        launcher = Launcher(env, cluster, rundir=RunDir.create(tmp_path / "r"))
        result = launcher.run(Target(script=str(script)), timeout=120)
    message = result.message()
    assert not result.ok and "--- log tail ---" in message
    assert "\\x1b]0;FAKE TITLE\\x07\\x1b[2Jerror: token=***" in message, message
    # the launch's cause line (the timeline's root cause: the rank that raised), scrubbed too
    assert "cause: rank 0 on host1: raised: RuntimeError: login failed with token=***" in message, message
    assert TOKEN not in message and "\x1b" not in message and "\x07" not in message
