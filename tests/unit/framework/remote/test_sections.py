"""Tests for framework.remote.sections: the one tagged-record format host scripts print, and its parser."""

from __future__ import annotations

import subprocess

from framework.remote.sections import MARK, PROBE_MARK, Record, read_records, sh_tag, tag_line


def test_records_keep_their_body_lines_and_drop_what_precedes_the_first_tag() -> None:
    text = "noise\n@@now 1.5\n@@files\nF 1 2 3 /c/core\nF 4 5 6 /c/core 2\n@@end\n"
    assert read_records(text) == [
        Record("now", "1.5", "", "@@now 1.5"),
        Record("files", "", "F 1 2 3 /c/core\nF 4 5 6 /c/core 2\n", "@@files"),
        Record("end", "", "", "@@end"),
    ]
    assert "".join(r.raw for r in read_records(text)) == text[len("noise\n"):]


def test_the_probe_mark_reads_begin_and_end_with_names_that_have_spaces() -> None:
    text = f"{PROBE_MARK}begin file:/p q\nno newline\n{PROBE_MARK}end file:/p q 2\n@@now not a probe tag\n"
    recs = read_records(text, PROBE_MARK)
    assert [(r.tag, r.value) for r in recs] == [("begin", "file:/p q"), ("end", "file:/p q 2")]
    assert recs[0].body == "no newline\n" and recs[1].body == "@@now not a probe tag\n"


def test_shell_and_python_write_the_same_tag_lines() -> None:
    script = "\n".join([sh_tag("end"), sh_tag("now", '"$x"'), sh_tag("ulimit", '"a b"')])
    out = subprocess.run(["/bin/sh", "-c", script], env={"x": "1.25 %s"}, capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == [tag_line("end"), tag_line("now", "1.25 %s"), tag_line("ulimit", "a b")]
    assert [(r.tag, r.value) for r in read_records(out)] == [("end", ""), ("now", "1.25 %s"), ("ulimit", "a b")]
    assert tag_line("x", mark=PROBE_MARK) == "@@camit@@ x" and MARK == "@@"
