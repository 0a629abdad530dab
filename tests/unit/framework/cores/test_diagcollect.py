"""``camit collect --diag``'s host script (framework.cores.diagcollect), run for real by sh: the plogs
come through the host file program, never through a name list, a link or a swapped folder."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path

from framework.cores import diagcollect


def _run(home: Path, folder: Path) -> str:
    env = {**os.environ, "HOME": str(home), "PATH": os.environ["PATH"]}
    proc = subprocess.run(["sh", "-c", str(diagcollect.diag_script(str(folder), 1))], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return proc.stdout


def _members(tgz: Path) -> list[str]:
    with tarfile.open(tgz) as tf:
        return [m.name for m in tf.getmembers() if m.isfile()]


def _read(tf: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tf.extractfile(member)
    assert f is not None, member.name
    return f.read()


def test_the_newest_plogs_are_packed_by_descriptor_and_a_linked_or_symlinked_one_is_not(tmp_path: Path) -> None:
    home, secret = tmp_path / "home", tmp_path / "root-only"
    (home / "ascend/log/debug/plog").mkdir(parents=True)
    secret.mkdir()
    ours = home / "ascend/log/debug/plog/plog-11_2.log"
    ours.write_text("[ERROR] HCCL(11): EI0006 ours\n")
    (home / "ascend/log/debug/plog/notes.txt").write_text("not a plog\n")
    (secret / "plog-9_9.log").write_text("SECRET\n")
    os.link(secret / "plog-9_9.log", home / "ascend/log/debug/plog/plog-22_1.log")  # a hard link to it
    (home / "ascend/log/run").symlink_to(secret, target_is_directory=True)  # a swapped folder
    out = _run(home, tmp_path / "work" / "camit-diag-1")

    plogs = re.search(r"^@@plogs (\S+)$", out, re.M)
    assert plogs and re.search(r"^@@diag (\S+)$", out, re.M), out
    names = _members(Path(plogs[1]))
    assert [Path(n).name for n in names] == ["plog-11_2.log"], names
    with tarfile.open(plogs[1]) as tf:
        assert b"SECRET" not in b"".join(_read(tf, m) for m in tf.getmembers() if m.isfile())
    assert diagcollect._plog_member(tarfile.TarInfo(names[0])) == Path("ascend/plog-11_2.log")
    assert diagcollect._plog_member(tarfile.TarInfo("x/notes.txt")) is None


def test_no_plog_means_no_plog_archive(tmp_path: Path) -> None:
    out = _run(tmp_path / "empty-home", tmp_path / "work" / "camit-diag-2")
    assert "@@plogs" not in out and re.search(r"^@@diag (\S+)$", out, re.M), out


def test_the_script_hands_no_file_list_to_cp_or_tar() -> None:
    text = str(diagcollect.diag_script("/w/camit-diag-3", 2))
    assert "xargs" not in text and " cp " not in text and "find " not in text
