"""``workdir:`` may not be ``/``, a system directory, a shared scratch root or a home root (issue 17, item 1).

camit creates, restricts and fills its workdir as root on every host; pointed at ``/``, ``/etc``,
``/var/tmp`` itself or ``/home`` it would change the mode of, and stage files in, a directory everybody
uses. The loader refuses those paths (in ``host_info.<h>.workdir`` and ``defaults.workdir``, however they
are spelt: ``//``, ``/var/tmp/``, ``/tmp/../var``) naming the key path, before any host is contacted;
a folder of camit's own below them stays fine. The refused list is
:data:`framework.config.document.SYSTEM_DIRS` plus everything under :data:`~framework.config.document.SYSTEM_TREES`.

Needs no lab.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.config import load
from framework.errors import ConfigError
from tests.security._env_terminal import run_cli

HOSTS = ("host_info:\n  host1:\n    manage_nic: {{name: eth0, ip: 192.0.2.11}}\n{extra}"
         "  host2:\n    manage_nic: {{name: eth0, ip: 192.0.2.12}}\n")

REFUSED = [
    "/", "//", "/bin", "/boot", "/dev", "/etc", "/etc/", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/tmp/", "/tmp/../var/tmp", "/usr", "/usr/bin",
    "/usr/lib", "/usr/local", "/usr/share", "/var", "/var/lib", "/var/log", "/var/tmp", "/var/tmp/", "//var/tmp",
    "/var/./tmp", "/dev/shm", "/dev/shm/camit", "/proc/self/cwd", "/sys/fs/cgroup",
]
ACCEPTED = ["/var/tmp/camit", "/home/ci/camit", "/root/camit", "/tmp/camit-ci", "/opt/camit", "/data/camit",
            "/usr/local/camit", "/var/lib/camit"]


def _write(tmp_path: Path, workdir: str, where: str) -> Path:
    path = tmp_path / "env.yaml"
    if where == "host":
        path.write_text(HOSTS.format(extra=f"    workdir: '{workdir}'\n"))
    else:
        path.write_text(HOSTS.format(extra="") + f"defaults:\n  workdir: '{workdir}'\n")
    return path


@pytest.mark.parametrize("where", ["host", "defaults"])
@pytest.mark.parametrize("workdir", REFUSED)
def test_system_and_root_directories_are_refused_naming_the_key(tmp_path: Path, workdir: str, where: str) -> None:
    path = _write(tmp_path, workdir, where)
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    key = "host_info.host1.workdir" if where == "host" else "defaults.workdir"
    assert info.value.key_path == key, str(info.value)
    assert "not a workdir" in str(info.value) and len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("workdir", ACCEPTED)
def test_a_folder_of_its_own_below_them_is_fine(tmp_path: Path, workdir: str) -> None:
    env = load(_write(tmp_path, workdir, "host"), environ={})
    assert env.hosts["host1"].workdir == workdir


def test_double_slash_is_normalised_everywhere(tmp_path: Path) -> None:
    env = load(_write(tmp_path, "//var/tmp//camit/", "defaults"), environ={})
    assert env.defaults.workdir == env.hosts["host2"].workdir == "/var/tmp/camit"


def test_workdir_root_through_the_cli(tmp_path: Path) -> None:
    path = _write(tmp_path, "/", "host")
    run = run_cli("env", "validate", str(path))
    assert run.rc == 2, run.describe()
    assert run.stderr.startswith(f"camit: error: {path}: host_info.host1.workdir: '/' is a system"), run.describe()
    assert len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
