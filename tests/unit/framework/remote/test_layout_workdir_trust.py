"""Issue 17 item 1, the pure half run by a real sh: the workdir guard, the hash tests, exclusive writes, and the
venv interpreter check (the lab half is tests/security/test_workdir_lab.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.deploy.plan import HostPlan, interpreter_ok
from framework.remote.layout import UNSAFE_RC, HostLayout, sh_sha_ok, sh_verified, sh_write_file, unsafe_reason

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)


def guard(workdir: Path) -> tuple[int, str | None]:
    res = sh(HostLayout(str(workdir)).guard_script() + "; echo GUARDED-OK")
    assert (res.returncode == 0) == ("GUARDED-OK" in res.stdout)
    return res.returncode, unsafe_reason(res.stdout)


def test_a_missing_workdir_is_made_private_component_by_component(tmp_path):
    work = tmp_path / "a" / "b" / "work"
    assert guard(work) == (0, None)
    for d in (tmp_path / "a", tmp_path / "a" / "b", work):
        assert d.stat().st_mode & 0o777 == 0o700, d


def test_an_own_readable_workdir_is_accepted_and_made_0700(tmp_path):
    work = tmp_path / "w"
    work.mkdir(mode=0o755)
    assert guard(work) == (0, None)
    assert work.stat().st_mode & 0o777 == 0o700


def test_a_symlinked_workdir_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "w").symlink_to(target)
    rc, why = guard(tmp_path / "w")
    assert rc == UNSAFE_RC and why == f"{tmp_path / 'w'}: is a symlink (to {target}), not a directory"
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_group_or_world_writable_workdir_is_refused(tmp_path, mode):
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, mode)
    rc, why = guard(work)
    assert rc == UNSAFE_RC and why is not None and why.startswith(f"{work}: is writable by group/others")
    assert work.stat().st_mode & 0o7777 == mode  # left as it was


def test_a_writable_parent_without_the_sticky_bit_is_refused_but_a_sticky_one_is_fine(tmp_path):
    parent = tmp_path / "p"
    parent.mkdir()
    os.chmod(parent, 0o777)
    rc, why = guard(parent / "w")
    assert rc == UNSAFE_RC and why is not None and why.startswith(f"{parent}: is writable by group/others")
    assert list(parent.iterdir()) == []  # refused before mkdir
    os.chmod(parent, 0o1777)  # like /var/tmp
    assert guard(parent / "w") == (0, None)


@needs_root
def test_a_workdir_or_parent_owned_by_another_user_is_refused(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    os.chown(work, 65534, 65534)
    rc, why = guard(work)
    assert rc == UNSAFE_RC and why == f"{work}: is owned by uid 65534, not by the SSH user (uid 0)"
    rc, why = guard(work / "inner")
    assert rc == UNSAFE_RC and why is not None and why.startswith(f"{work}: is owned by uid 65534")
    assert list(work.iterdir()) == []
    link = tmp_path / "l"
    link.symlink_to(tmp_path)
    os.lchown(link, 65534, 65534)
    rc, why = guard(link / "w2")
    assert rc == UNSAFE_RC and why == f"{link}: is a symlink owned by uid 65534"


def test_sha_checks_refuse_a_changed_file_and_a_symlink(tmp_path):
    f = tmp_path / "prog.py"
    f.write_bytes(b"print(1)\n")
    sha = hashlib.sha256(b"print(1)\n").hexdigest()
    assert sh(sh_sha_ok(str(f), sha)).returncode == 0
    link = tmp_path / "link.py"
    link.symlink_to(f)
    assert sh(sh_sha_ok(str(link), sha)).returncode != 0
    f.write_bytes(b"print(2)\n")
    res = sh(sh_verified(str(f), sha, "the shipped program") + "; echo RAN")
    assert res.returncode == 3 and "RAN" not in res.stdout
    assert f"the shipped program {f} does not match its sha256 {sha[:12]}: not run" in res.stderr
    assert sh(sh_sha_ok(str(tmp_path / "missing"), sha)).returncode != 0


@pytest.mark.parametrize("python", [sys.executable, "/nonexistent/python3"])
def test_sha_checks_with_the_hosts_python_agree_with_sha256sum_and_fall_back_to_it(tmp_path, python):
    """A big artifact is hashed by the host's python (OpenSSL's SHA-256); the same verdicts as ``sha256sum``,
    which still answers where that python cannot run."""
    data = os.urandom(3 * 1024 * 1024 + 17)  # more than one read block, not a multiple of it
    f = tmp_path / "big.run"
    f.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    assert sh(sh_sha_ok(str(f), sha, python)).returncode == 0
    assert sh(sh_sha_ok(str(f), hashlib.sha256(b"other").hexdigest(), python)).returncode != 0
    link = tmp_path / "link.run"
    link.symlink_to(f)
    assert sh(sh_sha_ok(str(link), sha, python)).returncode != 0
    assert sh(sh_sha_ok(str(tmp_path / "missing"), sha, python)).returncode != 0
    f.write_bytes(data[:-1] + b"x")
    res = sh(sh_verified(str(f), sha, "the staged package", python) + "; echo RAN")
    assert res.returncode == 3 and "RAN" not in res.stdout
    assert res.stderr.strip() == f"camit: the staged package {f} does not match its sha256 {sha[:12]}: not run"
    # where the python runs, it is what hashed (sha256sum itself is not run)
    if python == sys.executable:
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "sha256sum").write_text("#!/bin/sh\necho 0000\n")
        (shim / "sha256sum").chmod(0o755)
        f.write_bytes(data)
        env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
        assert subprocess.run(["sh", "-c", sh_sha_ok(str(f), sha, python)], env=env).returncode == 0
        assert subprocess.run(["sh", "-c", sh_sha_ok(str(f), sha)], env=env).returncode != 0


def test_exclusive_write_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted = tmp_path / "deploy-state.json"
    planted.symlink_to(victim)
    assert sh(sh_write_file(str(planted), "{\"x\": \"it's $(y)\"}")).returncode == 0
    assert victim.read_text() == "keep"
    assert not planted.is_symlink() and planted.read_text() == "{\"x\": \"it's $(y)\"}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy-state.json", "victim"]  # no temp left


def test_the_venv_interpreter_must_resolve_to_the_hosts_python(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    plan = HostPlan(host="h", workdir=str(tmp_path), python=sys.executable, venv=True, install_path="/x",
                    manage_ip="10.0.0.1")
    assert sh(interpreter_ok(plan)).returncode == 0
    py = tmp_path / "venv" / "bin" / "python"
    py.unlink()
    py.write_text("#!/bin/sh\necho planted\n")
    py.chmod(0o755)
    assert sh(interpreter_ok(plan)).returncode != 0


@needs_root
@pytest.mark.parametrize("plant", ["foreign", "symlink", "writable"])
def test_a_custom_install_path_outside_the_workdir_passes_the_same_guard(tmp_path, plant):
    """Issue 31 item 3 (security review 3, #15): ``set_env.bash`` under ``install_path`` is sourced as root, so
    a folder on its way that another user owns or could swap refuses the host, one line naming the path."""
    opt = tmp_path / "opt"
    opt.mkdir(mode=0o755)
    install = opt / "ascend"
    if plant == "foreign":
        os.chown(opt, 65534, 65534)
        why = "is owned by uid 65534 (not root or the SSH user, uid 0)"
    elif plant == "symlink":
        (tmp_path / "real").mkdir(mode=0o755)
        opt.rmdir()
        opt.symlink_to(tmp_path / "real")
        os.lchown(opt, 65534, 65534)  # a co-tenant's link (root's own, to a sound target, is accepted)
        why = "is a symlink owned by uid 65534 (not root)"
    else:
        opt.chmod(0o777)
        why = "is writable by group/others (mode 777) without the sticky bit"
    layout = HostLayout(str(tmp_path / "work"), str(install))
    res = sh(layout.guard_script() + "; echo GUARDED-OK")
    assert res.returncode == UNSAFE_RC and unsafe_reason(res.stdout) == f"{opt}: {why}"
    # inside the workdir (the default) or on a sound path: accepted
    assert sh(HostLayout(str(tmp_path / "work2")).guard_script() + "; echo ok").stdout == "ok\n"
    sound = tmp_path / "sound" / "ascend"
    sound.parent.mkdir(mode=0o755)
    assert sh(HostLayout(str(tmp_path / "work3"), str(sound)).guard_script() + "; echo ok").stdout == "ok\n"


@needs_root
def test_the_run_installer_never_runs_into_a_custom_install_path_a_co_tenant_owns(tmp_path):
    """The ``.run`` step judges a custom install path again (it may have been made between probe and
    install): a folder on the way owned by uid 65534 stops it before the installer runs."""
    from framework.deploy.plan import Artifact, install_run_script

    marker = tmp_path / "RAN"
    package = tmp_path / "pkg.run"
    package.write_text(f"#!/bin/sh\ntouch {marker}\n")
    sha = hashlib.sha256(package.read_bytes()).hexdigest()
    opt = tmp_path / "opt"
    opt.mkdir(mode=0o755)
    plan = HostPlan(host="h1", workdir=str(tmp_path / "work"), python=sys.executable, venv=False,
                    install_path=str(opt / "ascend"), manage_ip="10.0.0.1")
    art = Artifact("run_package", package, sha, package.stat().st_size)
    staged = Path(plan.remote_path(art))
    staged.parent.mkdir(parents=True)
    staged.write_bytes(package.read_bytes())
    os.chown(opt, 65534, 65534)
    res = sh(install_run_script(plan, art))
    assert res.returncode == UNSAFE_RC and unsafe_reason(res.stdout) == (
        f"{opt}: is owned by uid 65534 (not root or the SSH user, uid 0)")
    assert not marker.exists()
    os.chown(opt, 0, 0)
    assert sh(install_run_script(plan, art)).returncode == 0 and marker.exists()


def test_the_run_installer_runs_under_umask_077_so_a_co_tenant_reads_nothing_it_extracts(tmp_path):
    """What the ``.run`` extracts and writes while it installs is private to the SSH user: the step runs
    under ``umask 077`` whatever the login shell's umask (022 here, the common default)."""
    from framework.deploy.plan import Artifact, install_run_script

    package = tmp_path / "pkg.run"
    package.write_text('#!/bin/sh\nd="${1#--install-path=}"\nmkdir -p "$d/extract"\n'
                       'echo key > "$d/extract/payload"\numask > "$d/umask"\n')
    sha = hashlib.sha256(package.read_bytes()).hexdigest()
    plan = HostPlan(host="h1", workdir=str(tmp_path / "work"), python=sys.executable, venv=False,
                    install_path=str(tmp_path / "work" / "opp"), manage_ip="10.0.0.1")
    art = Artifact("run_package", package, sha, package.stat().st_size)
    staged = Path(plan.remote_path(art))
    staged.parent.mkdir(parents=True)
    staged.write_bytes(package.read_bytes())
    old = os.umask(0o022)
    try:
        res = sh(install_run_script(plan, art))
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    opp = Path(plan.install_path)
    assert (opp / "umask").read_text().strip() == "0077"
    for made in (opp / "extract", opp / "extract" / "payload"):
        assert made.stat().st_mode & 0o077 == 0, oct(made.stat().st_mode)
