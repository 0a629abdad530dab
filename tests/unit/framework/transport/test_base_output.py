"""The bounded output tail and the pgid marker parsing."""

from framework.commands import PGID_MARKER
from framework.transport.base import OutputTail


def test_tail_keeps_only_the_last_bytes_and_counts_all():
    tail = OutputTail(limit=1000)
    for i in range(10_000):
        tail.feed(f"{i:06d}\n".encode())
    assert tail.total == 70_000
    assert tail.truncated
    text = tail.text()
    assert len(text) == 1000
    assert text.endswith("009999\n")
    assert len(tail._buf) <= 2 * 1000 + 7  # memory stays bounded


def test_marker_is_stripped_even_when_split_across_chunks():
    tail = OutputTail(strip_pgid=True)
    data = f"{PGID_MARKER}4242\nreal stderr\n".encode()
    for b in data:
        tail.feed(bytes([b]))
    tail.close()
    assert tail.pgid == 4242
    assert tail.text() == "real stderr\n"


def test_no_marker_keeps_everything():
    tail = OutputTail(strip_pgid=True)
    tail.feed(b"hello\nworld\n")
    tail.close()
    assert tail.pgid is None and tail.text() == "hello\nworld\n"


def test_short_output_without_newline_is_flushed_on_close():
    tail = OutputTail(strip_pgid=True)
    tail.feed(b"x")
    tail.close()
    assert tail.text() == "x"


def test_marker_names_the_login_shell():
    tail = OutputTail(strip_pgid=True)
    tail.feed(f"{PGID_MARKER}77 -bash\nrest\n".encode())
    tail.close()
    assert (tail.pgid, tail.shell, tail.text()) == (77, "bash", "rest\n")
    old = OutputTail(strip_pgid=True)  # the marker of an older camit, without the shell
    old.feed(f"{PGID_MARKER}78\n".encode())
    old.close()
    assert (old.pgid, old.shell, old.text()) == (78, None, "")
