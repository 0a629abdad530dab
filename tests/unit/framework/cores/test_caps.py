"""framework.cores.caps: the edges of the coredump.conf and df parsers the core check relies on."""

from __future__ import annotations

from framework.cores.caps import core_findings, parse_coredump_conf, parse_space
from framework.cores.pattern import parse_core_pattern


def test_only_the_coredump_sections_known_keys_count() -> None:
    text = (
        "@file /etc/systemd/coredump.conf\nMaxUse=5G\n[Journal]\nStorage=none\n[Coredump]\n"
        "; Storage=journal\n  Storage = none  \nCompress=yes\nMaxUse\n\n"
    )
    assert parse_coredump_conf(text) == {"Storage": "none"}
    systemd = parse_core_pattern("|/usr/lib/systemd/systemd-coredump %P")
    warnings, notes = core_findings(systemd, text, None, npu=False, core_limit_bytes=None)
    assert warnings == ["systemd-coredump Storage=none: cores are logged, not stored"]
    assert notes == [
        "systemd-coredump ProcessSizeMax=32G, ExternalSizeMax=32G, MaxUse=10% of the file system"
    ]


def test_df_output_that_is_not_a_row_of_numbers_gives_no_space() -> None:
    head = "dir /var/crash\nFilesystem 1024-blocks Used Available Capacity Mounted on\n"
    assert parse_space(head + "/dev/vda 100 50 4096 50% /\n") == ("/var/crash", 4096 * 1024)
    assert parse_space(head + "  /dev/vda 100 50 4096\n") == ("/var/crash", 4096 * 1024)
    assert parse_space(head + "/dev/vda 100 50\n") is None
    assert parse_space(head + "/dev/vda 100 50 4096 50% /\ndf: /x: No such file\n") is None
    assert parse_space(head) is None
    assert parse_space("/dev/vda 100 50 4096 50% /\n") is None
