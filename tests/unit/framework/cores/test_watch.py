"""framework.cores.watch: the pieces of CoreWatch that read files and choose defaults."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.cores.inspection import RankProc
from framework.cores.watch import CoreDefaults, CoreWatch, rank_procs
from framework.hosts import Cluster


@pytest.mark.parametrize(
    "status",
    [
        "[2, 4321]",  # valid JSON, not an object
        json.dumps({"rank": 3, "pid": 4321}),  # another rank's status
        json.dumps({"rank": 2, "pid": "4321"}),  # a pid that is not a number
        "{not json",
    ],
)
def test_a_status_file_that_is_not_the_ranks_gives_no_pid(tmp_path: Path, status: str) -> None:
    (tmp_path / "host2").mkdir()
    (tmp_path / "host2" / "rank2.json").write_text(status)
    lr = SimpleNamespace(
        launch_id="L9",
        report_dir=str(tmp_path),
        ranks={2: SimpleNamespace(host="host2", signal="SIGSEGV")},
    )
    assert rank_procs(lr) == [RankProc("L9", 2, "host2", None, "SIGSEGV")]
    assert (
        rank_procs(SimpleNamespace(launch_id="L9", report_dir=None, ranks=lr.ranks))[0].pid is None
    )


def test_an_explicit_zero_cap_keeps_every_core_on_its_host_and_defaults_fill_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CAMIT_CORE_POLICY", raising=False)
    cluster = Cluster([])
    assert CoreWatch(cluster, cap_bytes=0, defaults=CoreDefaults(cap_bytes=5)).cap_bytes == 0
    watch = CoreWatch(cluster, defaults=CoreDefaults(cap_bytes=5, gdb_timeout=7.0))
    assert (watch.cap_bytes, watch.gdb_timeout) == (5, 7.0)
    assert (
        CoreWatch(cluster, gdb_timeout=3.0, defaults=CoreDefaults(gdb_timeout=7.0)).gdb_timeout
        == 3.0
    )
