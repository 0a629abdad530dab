"""Issue 31 item 3 on the lab (security review 3, #3): a tree shipped to the controller's absolute path lives
under trust on the real host.

The co-tenant is uid 65534 on the host itself (``setpriv``), working in the host's private, sticky /tmp as the
review's did: it pre-creates the CI clone's top folder, or leaves its own copy of a file camit would keep.
camit must refuse with one line naming host and path, and write nothing; without a co-tenant the tree is made
one level at a time, root's, and taken away whole.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.commands import quote
from framework.errors import TransferError
from framework.samepath import ship

pytestmark = pytest.mark.lab
AS_NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"


@pytest.fixture
def clone(tmp_path_factory) -> Iterator[Path]:
    """A CI clone under the controller's /tmp (its path does not exist on the lab hosts)."""
    root = Path("/tmp") / f"camit-ci-{secrets.token_hex(4)}"
    case = root / "ws" / "case"
    case.mkdir(parents=True)
    (case / "echo_app").write_text("#!/bin/sh\necho genuine\n")
    (case / "echo_app").chmod(0o755)
    yield case
    for p in sorted(root.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    root.rmdir()


def test_a_co_tenants_folder_or_file_on_the_way_is_refused_and_a_clean_tree_is_roots(cluster, clone):
    host = cluster["host1"]
    top = str(clone.parent.parent)
    app = str(clone / "echo_app")
    try:
        # 1: the co-tenant pre-creates the top folder in the sticky /tmp and waits with its own echo_app
        host.check(f"{AS_NOBODY} sh -c {quote(f'mkdir -p {quote(str(clone))} && chmod 755 {quote(top)}')}")
        with pytest.raises(TransferError) as err:
            ship(host, clone)
        assert str(err.value) == (f"host1: refusing to ship {clone}: {top}: is owned by uid 65534 "
                                  "(not root or the SSH user, uid 0)")
        assert host.check(["ls", "-A", "--", str(clone)]).stdout == ""  # nothing written into its folder
        host.check(["rm", "-rf", "--", top])

        # 2: no co-tenant: made one level at a time, root's, 0755, the file runs; removed whole afterwards
        shipment = ship(host, clone)
        assert shipment.created == [top] and shipment.written == [app]
        owners = host.check(["stat", "-c", "%u %a %n", "--", top, str(clone), app]).stdout.split("\n")
        assert owners[:3] == [f"0 755 {top}", f"0 755 {clone}", f"0 755 {app}"]
        assert host.check([app]).stdout == "genuine\n"

        # 3: the same content, but the kept file is the co-tenant's (it could rewrite it): refused
        host.check(["chown", "65534:65534", "--", app])
        with pytest.raises(TransferError) as err:
            ship(host, clone)
        assert str(err.value) == (f"host1: refusing to ship {clone}: {app}: is owned by uid 65534, "
                                  "not by the SSH user (uid 0)")
        shipment.remove()
        assert host.run(["test", "-e", top]).rc == 1
    finally:
        host.run(["rm", "-rf", "--", top])


def test_a_roots_symlinked_top_folder_is_followed_and_a_co_tenants_is_refused(cluster, clone):
    """A real cluster's symlinked ancestor (``/home -> /data/home``): on the host the clone's top folder is a
    symlink root owns to a sound folder: the tree is shipped through it. The same link owned by uid 65534
    is refused with one line naming host and path, and nothing is written behind it."""
    host = cluster["host1"]
    top = str(clone.parent.parent)
    real = top + ".real"
    try:
        host.check(f"mkdir -m 0755 {quote(real)} && ln -s -- {quote(real)} {quote(top)}")
        shipment = ship(host, clone)
        assert shipment.written == [str(clone / "echo_app")]
        assert host.check([str(clone / "echo_app")]).stdout == "genuine\n"
        assert host.check(["stat", "-c", "%u", "--", f"{real}/ws/case/echo_app"]).stdout.strip() == "0"
        shipment.remove()
        host.check(["rm", "-rf", "--", top, real])
        host.check(f"{AS_NOBODY} sh -c {quote(f'mkdir -m 0755 {quote(real)} && ln -s -- {quote(real)} {quote(top)}')}")
        with pytest.raises(TransferError) as err:
            ship(host, clone)
        assert str(err.value) == (f"host1: refusing to ship {clone}: {top}: is a symlink owned by uid 65534 "
                                  "(not root)")
        assert host.check(["ls", "-A", "--", real]).stdout == ""
    finally:
        host.run(["rm", "-rf", "--", top, real])
