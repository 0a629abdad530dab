"""The timeline's clock offsets come from preflight.json's ``clock.offsets``; a file without them, or one
that is not what preflight writes, means offset 0 for every host, said so (framework.launch.timeline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.launch.timeline import offsets_of

MALFORMED = ["not json", "[1, 2]", '{"clock": null}', '{"clock": [1]}', '{"clock": {"offsets": [1]}}',
             '{"clock": {"offsets": {"h1": "soon"}}}', '{"clock": {"offsets": {"h1": null}}}']


@pytest.mark.parametrize("text", MALFORMED)
def test_a_preflight_file_without_usable_offsets_means_offset_0(tmp_path: Path, text: str) -> None:
    (tmp_path / "preflight.json").write_text(text)
    assert offsets_of(tmp_path) == ({}, "no preflight clock offsets in this run: every host's offset taken as 0")


def test_no_preflight_file_means_offset_0(tmp_path: Path) -> None:
    assert offsets_of(tmp_path)[0] == {}


def test_the_offsets_preflight_measured(tmp_path: Path) -> None:
    (tmp_path / "preflight.json").write_text('{"clock": {"offsets": {"h1": 0.25, "h2": -1}}}')
    assert offsets_of(tmp_path)[0] == {"h1": 0.25, "h2": -1.0}
