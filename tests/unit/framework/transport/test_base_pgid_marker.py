"""The process-group marker is found wherever it appears in a command's first stderr (issue 17 item 5)."""

from __future__ import annotations

import pytest

from framework.transport.base import HEAD_LIMIT, OutputTail

NOISE = b"bash: warning: setlocale: LC_ALL: cannot change locale (xx_XX.UTF-8)\n/etc/profile.d/x.sh: hello\n"


@pytest.mark.parametrize("chunks", [
    [NOISE + b"__camit_pgid__=4242 -bash\nreal error\n"],
    [NOISE[:10], NOISE[10:] + b"__camit_", b"pgid__=4242 -bash", b"\nreal error\n"],  # split anywhere
])
def test_marker_after_login_shell_noise(chunks):
    t = OutputTail(strip_pgid=True)
    for c in chunks:
        t.feed(c)
    t.close()
    assert (t.pgid, t.shell) == (4242, "bash")
    # the noise is the command's stderr and kept; the marker line is ours and dropped
    assert t.text() == NOISE.decode() + "real error\n"


def test_marker_first_as_before():
    t = OutputTail(strip_pgid=True)
    t.feed(b"__camit_pgid__=77 /bin/sh\nout\n")
    t.close()
    assert (t.pgid, t.shell, t.text()) == (77, "sh", "out\n")


def test_marker_only_at_a_line_start_and_with_a_number():
    t = OutputTail(strip_pgid=True)
    t.feed(b"echo __camit_pgid__=1 x\n__camit_pgid__=abc\n__camit_pgid__=99 dash\n")
    t.close()
    assert (t.pgid, t.shell) == (99, "dash")


def test_no_marker_keeps_everything_and_the_head_is_bounded():
    t = OutputTail(strip_pgid=True)
    t.feed(b"x" * (HEAD_LIMIT + 10))
    assert t.total == HEAD_LIMIT + 10  # given up waiting for a marker past the limit: nothing held back
    t.feed(b"__camit_pgid__=5 sh\n")
    t.close()
    assert t.pgid is None
