"""rundir.append_text: sections added by several processes of one run (xdist workers) all stay, whole."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from framework.records.folder import append_text


def _append_many(path: str, worker: int) -> None:
    for i in range(20):
        append_text(Path(path), f"== w{worker} case{i} ==\nhost1:\n  !! EI0006 from w{worker} {i}\n")


def test_sections_from_four_processes_at_once_are_all_there_and_whole(tmp_path):
    path = tmp_path / "run" / "signatures.txt"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(path), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    sections = path.read_text().split("== ")[1:]
    assert sorted(sections) == sorted(f"w{w} case{i} ==\nhost1:\n  !! EI0006 from w{w} {i}\n"
                                      for w in range(4) for i in range(20))


def test_the_first_section_makes_the_file_and_the_next_follows_it(tmp_path):
    path = tmp_path / "signatures.txt"
    append_text(path, "a\n")
    append_text(path, "b\n")
    assert path.read_text() == "a\nb\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".signatures.txt.lock", "signatures.txt"]
