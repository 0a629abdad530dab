"""camit calibrate's fused-vs-golden fact: the suite's tolerances read from the suite, the verdict
per dtype from the ranks' answers, the hosts a world-4 launch takes, CASE_4RANK's data as upstream's
UT builds it, and the comparison (verdicts compared, measurements not)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from framework.calib import compare, golden, golden_rank

REPO = Path(__file__).resolve().parents[4]
FUSED_TEST = REPO / "suites" / "cam" / "rank" / "test_fused_rank.py"


def _suite_tolerances() -> dict[str, float]:
    """FUSED_REL and the rtol/atol of check_fused's expect_close on the output (from the suite)."""
    tree = ast.parse(FUSED_TEST.read_text(encoding="utf-8"))
    out: dict[str, float] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FUSED_REL":
            out["norm_rel"] = ast.literal_eval(node.value)
        if isinstance(node, ast.FunctionDef) and node.name == "check_fused":
            call = next(c for c in ast.walk(node) if isinstance(c, ast.Call)
                        and getattr(c.func, "id", "") == "expect_close")
            out.update({k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg})
    return out


def test_the_verdict_uses_the_suites_fused_tolerances() -> None:
    assert _suite_tolerances() == golden.SUITE_TOLERANCES


def _row(**kw: Any) -> dict[str, Any]:
    row = {"elements": 1000, "max_abs": 0.5, "max_rel": 0.01, "norm_rel": 0.001, "outside": [0],
           "counts_equal": True}
    row.update(kw)
    return row


def _ranks(rows: list[dict[str, Any]], dtype: str = "bfloat16") -> list[dict[str, Any]]:
    return [{"rank": r, "dtypes": {dtype: row}} for r, row in enumerate(rows)]


@pytest.mark.parametrize(("rows", "want"), [
    ([_row()] * 4, "holds"),
    ([_row(), _row(), _row(outside=[19]), _row()], "holds"),  # 19 of 4000: below rtol's fraction
    ([_row(outside=[20]), _row(outside=[20]), _row(outside=[20]), _row(outside=[20])],
     "fails: allclose(rtol 0.02, atol 2.0): 80 of 4000 elements outside"),
    ([_row(), _row(norm_rel=0.006), _row(), _row()], "fails: norm-relative 0.006 >= 0.005"),
    ([_row(), _row(), _row(), _row(counts_equal=False)], "fails: expert_token_nums differ"),
    ([_row()] * 3, "not measured: 3 of 4 ranks answered"),
    ([_row(), {"error": "RuntimeError: boom"}, _row(), _row()], "not measured: RuntimeError: boom"),
])
def test_the_verdict_of_the_worst_rank(rows: list[dict[str, Any]], want: str) -> None:
    facts = golden.facts(_ranks(rows), "src")
    assert facts[f"{golden.KEY}.bfloat16"] == {"value": want, "source": "src"}
    assert facts[f"{golden.KEY}.float16"]["value"] == "not measured: 0 of 4 ranks answered"


def test_measured_is_the_worst_rank_and_names_the_ranks() -> None:
    rows = [_row(), _row(max_abs=1.5, norm_rel=0.002), _row(max_rel=0.3), _row()]
    text = golden.facts(_ranks(rows), "src")[f"{golden.KEY}.bfloat16.measured"]["value"]
    assert text == ("max_abs 1.5, max_rel 0.3 (|golden| >= 1), norm_rel 0.002, outside 0 of 4000, "
                    "counts equal (worst of 4 ranks)")


def test_rank_lines_are_found_among_other_output() -> None:
    line = golden.MARK + json.dumps({"rank": 1, "dtypes": {"float16": _row()}})
    text = f"noise\n[rank1]: {line}\n{golden.MARK}{{not json\n" + golden.MARK + json.dumps(
        {"rank": 0, "dtypes": {}})
    assert [d["rank"] for d in golden.parse(text)] == [0, 1]


@pytest.mark.parametrize(("devices", "want"), [
    ([16, 16], (1, 4)), ([2, 2], (2, 2)), ([2, 2, 2], (2, 2)), ([1, 1, 1, 1, 1], (4, 1)),
    ([2], None), ([0, 0], None), ([3, 1], None), ([1, 1, 1], None),
])
def test_world_4_takes_the_fewest_hosts_that_hold_it(devices: list[int],
                                                     want: tuple[int, int] | None) -> None:
    assert golden.placement(devices) == want


def test_case_data_follows_upstreams_case_4rank() -> None:
    """E 16 over world 16 (one local expert, to keep it small): ids r*bs*k.. mod E, the ranges and
    dtypes upstream's UT gives (gmm2's scale in bf16 for bf16 x, float32 for fp16)."""
    bf = golden_rank.case_data(3, 16, 30, torch.bfloat16)
    fp = golden_rank.case_data(3, 16, 30, torch.float16)
    c = golden_rank.CASE
    assert bf["ids"].dtype == torch.int32 and bf["ids"].shape == (c["batch"], c["top_k"])
    assert bf["ids"].flatten().tolist() == [(3 * 16 * 8 + i) % 16 for i in range(16 * 8)]
    assert bf["x"].dtype == torch.bfloat16  # uniform [-5, 5) in float32, then rounded to bf16
    assert -5 <= float(bf["x"].min()) < float(bf["x"].max()) <= 5
    assert bf["w1"].shape == (1, c["hidden"], 2 * c["inter"]) and bf["w1"].dtype == torch.int8
    assert bf["w2"].shape == (1, c["inter"], c["hidden"])
    assert int(bf["w1"].min()) == -16 and int(bf["w1"].max()) == 15
    assert float(bf["s1"].min()) >= 0.0015 and float(bf["s1"].max()) < 0.0045
    assert (bf["s2"].dtype, fp["s2"].dtype) == (torch.bfloat16, torch.float32)
    assert torch.equal(golden_rank.case_data(3, 16, 30, torch.bfloat16)["w2"], bf["w2"])


def test_measure_counts_elements_outside_each_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMIT_GOLDEN_TOL", "0.02,2.0;0,0.1")
    want = torch.tensor([[10.0, -100.0], [0.5, 0.0]])
    got = want + torch.tensor([[0.2, 3.0], [0.05, 0.0]])
    row = golden_rank.measure(got, want)
    assert row["outside"] == [0, 2] and row["elements"] == 4
    assert row["max_abs"] == pytest.approx(3.0) and row["max_rel"] == pytest.approx(0.03)


def test_compare_names_a_verdict_never_a_measurement() -> None:
    profile = {f"{golden.KEY}.bfloat16": "holds", f"{golden.KEY}.bfloat16.measured": "max_abs 0"}
    moved = {f"{golden.KEY}.bfloat16": "holds", f"{golden.KEY}.bfloat16.measured": "max_abs 9"}
    assert compare.differences(moved, profile) == []
    failed = {**moved, f"{golden.KEY}.bfloat16": "fails: expert_token_nums differ"}
    assert compare.differences(failed, profile) == [f"{golden.KEY}.bfloat16"]


def test_no_npu_hosts_is_one_fact_per_key_saying_why() -> None:
    facts = golden.not_measured("skipped (--no-golden)")
    assert sorted(facts) == sorted(f"{golden.KEY}.{d}{s}" for d in golden.DTYPES
                                   for s in ("", ".measured"))
    assert {f["value"] for f in facts.values()} == {"not measured: skipped (--no-golden)"}
