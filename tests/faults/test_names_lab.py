"""Hostile test names end to end: rank-side test ids, a rank-side file name, a failure message and the
controller's checkout path with spaces, quotes, ``$()``, backticks, ``;``, XML metacharacters, control
characters and unicode go through a real ``pytest suites/cam`` run on the lab and into the reports.

Expected: the suite runs (nothing is evaluated by a shell: no file appears in any host's /tmp), the
failing case is reported under its own name with its message, both JUnit files validate against the
schema and carry the names, index.html and the terminal summary show them escaped, and no process
of the run is left on any host.
"""

from __future__ import annotations

import html
import secrets
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _pytest.junitxml import bin_xml_escape

from framework.report.junit import validate_junit
from tests.support.camit_labtools import REPO, Footprint, wait_none_left
from tests.support.xmltree import attr, one

pytestmark = pytest.mark.lab

TOKEN = secrets.token_hex(3)
#: rank-side test ids; pytest keeps them as they are with the ini option set in the checkout
IDS = [
    "two words",
    "it's",
    'say "hi"',
    f"$(touch /tmp/camit-name-dollar-{TOKEN})",
    f"`touch /tmp/camit-name-tick-{TOKEN}`",
    f"a; touch /tmp/camit-name-semi-{TOKEN}",
    "ünïcødé → ∑ 测试 🚀",
    "<tag a='1'> & ]]>",
]
FAILING = "<tag a='1'> & ]]>"
MESSAGE = "boom <b>&amp;</b> ]]> \x1b[31mred\x1b[0m bell\x07 ünï"
RANK_FILE = "test_odd names; ü $(x).py"
RANK_TEST = f"""\
import pytest

IDS = {IDS!r}


@pytest.mark.parametrize("name", IDS, ids=IDS)
def test_named(name):
    assert name in IDS
    if name == {FAILING!r}:
        raise AssertionError({MESSAGE!r})
"""
INI = """\
[pytest]
disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true
"""


@pytest.fixture
def checkout(tmp_path):
    """A miniature upstream checkout at a hostile path, with one hostile rank-side test file."""
    root = tmp_path / "src 'q' \"dq\" $(touch x) `id`; ü"
    ut = root / "test" / "cam" / "ut"
    (ut / "odd").mkdir(parents=True)
    (ut / "pytest.ini").write_text(INI)
    (ut / "odd" / RANK_FILE).write_text(RANK_TEST, encoding="utf-8")
    return root


def test_hostile_test_names_reach_every_report_intact(lab, env_variant, workdir_name, checkout, tmp_path):
    reports = tmp_path / "reports ü 'q' $(x)"
    env = env_variant(lambda doc: doc["defaults"].__setitem__("workdir", f"/var/tmp/camit/{workdir_name}"),
                      "names.yaml")
    fp = Footprint(lab, ["host1", "host2", "host3", "host4"], workdir_name)
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_upstream.py", "--env", str(env),
                           "--umdk-src", str(checkout), "--no-deploy", "--world-sizes", "4", "--report-dir",
                           str(reports), "-p", "no:cacheprovider", "-q", "-rs"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    # one controller test ran and failed because of the one failing rank-side case, on every rank
    assert proc.returncode == 1, out[-4000:]
    assert "1 failed" in proc.stdout, out[-4000:]
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr[-3000:]
    folder = (reports / "latest").resolve()
    for name in ("junit.xml", "cluster.xml"):
        assert validate_junit(folder / name) == [], name

    # cluster.xml: every rank's suite holds every case under its own name; the failing one with its message.
    # The names are the rank-side pytest's: its junitxml writes characters above U+FFFF as "#x1F680"
    # (pytest-dev/pytest#14483, fixed upstream after 9.0) and camit keeps what the rank wrote.
    cluster = ET.parse(folder / "cluster.xml").getroot()
    cases = [c for c in cluster.iter("testcase") if "odd" in (c.get("classname") or "")]
    # (a rank the launch tore down after another rank failed first, once its tests had reported, has one
    # more case, ``rank_exit``, skipped as RankTornDown: whether the teardown reaches it first is a race)
    torn = [c for c in cases if c.get("name") == "rank_exit"]
    assert all(one(c, "skipped").get("type") == "RankTornDown" for c in torn)
    for rank in range(4):
        names = {c.get("name") for c in cases if f".rank{rank}." in (c.get("classname") or "")} - {"rank_exit"}
        assert names == {bin_xml_escape(f"test_named[{i}]") for i in IDS}, (rank, names)
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 4 and {c.get("name") for c in failed} == {f"test_named[{FAILING}]"}
    text = (one(failed[0], "failure").get("message") or "") + (one(failed[0], "failure").text or "")
    assert "boom <b>&amp;</b> ]]>" in text and "ünï" in text
    assert "\x1b" not in text and "\x07" not in text  # terminal escapes and control bytes do not reach the XML

    # pytest's own junit.xml names the controller test by the hostile file path (the controller's pytest
    # writes non-ASCII in parameter ids as escapes, as it always does)
    junit = ET.parse(folder / "junit.xml").getroot()
    ctl = [c for c in junit.iter("testcase") if "test_upstream_ut" in (c.get("name") or "")]
    escaped = RANK_FILE.encode("unicode_escape").decode("ascii")
    assert len(ctl) == 1 and escaped in attr(ctl[0], "name")
    assert f"test_named[{FAILING}]" in (one(ctl[0], "failure").get("message") or "") + \
        (one(ctl[0], "failure").text or "")

    # the offline page shows the names escaped, never as markup
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert html.escape(f"test_named[{FAILING}]", quote=False) in page or \
        html.escape(f"test_named[{FAILING}]") in page
    assert "<tag a='1'>" not in page and "<b>&amp;</b>" not in page

    # the summary on the terminal names the failing case and the rank
    assert f"test_named[{FAILING}]" in proc.stdout

    # no shell evaluated anything anywhere; nothing of the run left running
    assert fp.strays() == {}
    for pattern in ("camit-name-dollar-", "camit-name-tick-", "camit-name-semi-"):
        assert not list(Path("/tmp").glob(pattern + TOKEN)), pattern
    # the launch is named after the hostile file, reduced to what is safe in a path and a tag
    launches = list(folder.glob("launch-*.json"))
    assert [p.name for p in launches if "-test_odd_names_x1-" in p.name] == [p.name for p in launches], launches
    for launch in launches:
        assert wait_none_left(launch.name[len("launch-"):-len(".json")], 5) == []
