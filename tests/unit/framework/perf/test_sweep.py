"""The sweep's matrix (named, from a file, inside the contract) and its rows from the ranks' documents."""

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from framework.perf import matrix, sweep
from framework.perf.row import packaged_schema


def test_named_matrices_and_the_contract_filter():
    quick = matrix.load("quick")
    cfgs = matrix.configs(quick, 4)
    assert {c.op for c in cfgs} == {"dispatch", "combine", "fused_deep_moe"}
    assert all(c.experts == 8 and c.world == 4 for c in cfgs)
    # fused_deep_moe: only the batch of 128 is inside its tiling (at most 256)
    assert len(matrix.configs(matrix.load("nightly"), 16)) == 2 * 4 * 2 * 2 * 2 + 1 * 2 * 2 * 2
    m = matrix.Matrix(tokens=[16, 9000], hidden=[512, 1024], top_k=[2, 12], experts_per_rank=[2])
    # 9000 tokens, hidden 512 and top_k 12 > 8 experts are outside the prefill tiling
    assert {(c.tokens, c.hidden, c.top_k) for c in matrix.configs(m, 4)} == {(16, 1024, 2)}
    assert matrix.estimate_s(quick, [4, 8]) > matrix.estimate_s(quick, [4])


def test_a_matrix_file_is_read_and_a_bad_one_named(tmp_path):
    good = tmp_path / "m.yaml"
    good.write_text("tokens: [32]\nhidden: [2048]\ntop_k: [4]\niterations: 3\n")
    assert matrix.load(str(good)).iterations == 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tokens": [32], "hidden": [2048], "top_k": [4], "iters": 3}))
    with pytest.raises(ValueError, match=r"bad\.json: iters: Extra inputs are not permitted"):
        matrix.load(str(bad))
    with pytest.raises(ValueError, match="neither quick nor nightly nor a file"):
        matrix.load("weekly")


def _doc(rank, world, slow=1.0):
    rows = [[(i + j) % 3 + 1 for j in range(world)] for i in range(world)]
    shape = {"tokens": 16, "hidden": 1024, "top_k": 2, "experts": 2 * world}
    times = [100.0 * (slow if rank == world - 1 else 1) + it for it in range(6)]
    return {"rank": rank, "world": world, "seed": 3, "warmup": 1, "iterations": 6,
            "environment": {"cann": "8.5.0", "driver": "25.2.3", "op_lib_version": "1.0", "op_lib_hash": "ab",
                            "hccl": {"HCCL_BUFFSIZE": "4096"}},
            "shapes": [{"shape": shape, "rows": rows, "dispatch_us": times, "combine_us": [t / 2 for t in times],
                        "reference_us": [200.0] * 6, "dispatch_hash": [f"d{rank}"] * 6,
                        "combine_hash": [f"c{rank}"] * 6}]}


def test_rows_from_the_ranks_documents():
    cfgs = matrix.configs(matrix.Matrix(ops=["dispatch", "combine"], tokens=[16], hidden=[1024], top_k=[2]), 4)
    assert sweep.spec(cfgs, 1, 6) == "1;6;16:1024:2:8;"
    docs = [_doc(r, 4, slow=1.2) for r in range(4)]
    rows = sweep.rows(cfgs, docs, ["h1", "h1", "h2", "h2"], run_id="r", cluster="lab", soc="ascend910_93")
    by_op = {r.config.op: r for r in rows}
    d, c = by_op["dispatch"], by_op["combine"]
    rm = docs[0]["shapes"][0]["rows"]
    assert d.bytes.total == sum(map(sum, rm)) * 1024 * 2 == c.bytes.total
    inter = sum(rm[i][j] for i in range(4) for j in range(4) if (i < 2) != (j < 2)) * 2048
    assert d.bytes.inter == inter == c.bytes.inter
    assert d.time_us.p50 == pytest.approx(122.5) and c.time_us.p50 == pytest.approx(61.25)
    assert d.speedup == pytest.approx(200 / 122.5)
    assert len(set(d.output_hashes)) == 1 and d.output_hashes != c.output_hashes
    assert d.straggler is not None and d.straggler.startswith("straggler: rank 3 on h2 x1.2")
    assert d.environment.cann == "8.5.0" and d.environment.hccl == {"HCCL_BUFFSIZE": "4096"}
    for r in rows:
        jsonschema.validate(json.loads(r.to_json()), packaged_schema())


def test_a_rank_document_of_other_shapes_is_named():
    cfgs = matrix.configs(matrix.Matrix(tokens=[32], hidden=[1024], top_k=[2]), 2)
    with pytest.raises(ValueError, match=r"rank 0: perf-sweep-rank0\.json has the shapes"):
        sweep.rows(cfgs, [_doc(0, 2), _doc(1, 2)], ["h", "h"], run_id="r", cluster="c", soc="s")


# --- fused_deep_moe in the sweep: matrix, spec, rows (schema-valid), launch env, compare and plots
SUITE = Path(__file__).resolve().parents[4] / "suites" / "cam"
for _path in (str(SUITE), str(SUITE / "rank")):
    if _path not in sys.path:
        sys.path.append(_path)

import camcontract  # noqa: E402
import camsuite  # noqa: E402

FUSED_M = matrix.Matrix(tokens=[16, 300], hidden=[1024, 1100], top_k=[2], experts_per_rank=[2])


def _fused_doc(rank, world, slow=1.0):
    doc = _doc(rank, world, slow)
    entry = doc["shapes"][0]
    doc["fused"] = [{"shape": {**entry["shape"], "inter": 512}, "rows": entry["rows"],
                     "fused_deep_moe_us": [t * 3 for t in entry["dispatch_us"]], "reference_us": [200.0] * 6,
                     "fused_deep_moe_hash": [f"f{rank}"] * 6}]
    return doc


def test_the_matrix_has_fused_deep_moe_inside_its_contract():
    cfgs = matrix.configs(FUSED_M, 4)
    fused = {(c.tokens, c.hidden) for c in cfgs if c.op == sweep.FUSED}
    # batch 300 > 256 and hidden 1100 (not a multiple of 256) are outside fused_deep_moe's tiling
    assert fused == {(16, 1024)}
    assert len([c for c in cfgs if c.op == "dispatch"]) == 4  # the prefill tiling takes all four
    ops: list[str] = [c.op for c in matrix.configs(matrix.load("quick"), 4)]
    assert ops.count(sweep.FUSED) == 2
    wide = FUSED_M.model_copy(update={"fused_inter": 4096})  # gmm1 width 8192 > 6144
    assert not [c for c in matrix.configs(wide, 4) if c.op == sweep.FUSED]
    assert sweep.spec(matrix.configs(FUSED_M, 4), 1, 6).endswith(":2:8;16:1024:2:8:512")


def test_the_matrix_keeps_the_contracts_fused_limits():
    lim = camcontract.LIMITS
    assert matrix._FUSED_BATCH[1] == lim["fused.batch"].hi and lim["fused.top_k"].hi == matrix._FUSED_TOP_K
    assert lim["fused.hidden"].step == matrix._FUSED_HIDDEN_STEP
    assert (lim["fused.gmm1"].lo, lim["fused.gmm1"].hi, lim["fused.gmm1"].step) == matrix._FUSED_GMM1


def test_fused_rows_are_built_validated_and_read_back_into_compare_and_plots(tmp_path):
    from framework.perf import compare, plots

    cfgs = [c for c in matrix.configs(matrix.Matrix(tokens=[16], hidden=[1024], top_k=[2]), 4)]
    hosts = ["h1", "h1", "h2", "h2"]
    runs = {}
    for name, slow in (("a", 1.0), ("b", 1.5)):
        rows = sweep.rows(cfgs, [_fused_doc(r, 4, slow) for r in range(4)], hosts, run_id=name, cluster="lab",
                          soc="ascend910_93")
        (tmp_path / name).mkdir()
        (tmp_path / name / "perf-rows.jsonl").write_text("".join(r.to_json() + "\n" for r in rows))
        runs[name] = compare.load_run(tmp_path / name)
    fused = runs["a"]["fused_deep_moe.t16.h1024.k2.e8.w4.bfloat16.none"]
    jsonschema.validate(json.loads(fused.to_json()), packaged_schema())
    assert fused.reference is not None and fused.speedup == pytest.approx(200 / (3 * 102.5))
    assert fused.bytes.total == runs["a"]["dispatch.t16.h1024.k2.e8.w4.bfloat16.none"].bytes.total
    assert len(set(fused.output_hashes)) == 1
    deltas = {d.config: d for d in compare.compare(runs["a"], runs["b"])}
    assert "fused_deep_moe.t16.h1024.k2.e8.w4.bfloat16.none" in deltas
    assert "fused_deep_moe" in plots.bandwidth_svg(list(runs["a"].values()), sweep.FUSED)


def test_a_rank_document_without_the_fused_shapes_is_named():
    cfgs = matrix.configs(matrix.Matrix(tokens=[16], hidden=[1024], top_k=[2]), 4)
    with pytest.raises(ValueError, match=r"rank 0: perf-sweep-rank0\.json has the fused \[\], expected"):
        sweep.rows(cfgs, [_doc(r, 4) for r in range(4)], ["h"] * 4, run_id="r", cluster="c", soc="s")


def test_the_sweep_launch_sets_hccl_buffsize_for_a_fused_window_that_needs_it():
    only_fused = [c for c in matrix.configs(matrix.Matrix(tokens=[16], hidden=[1024], top_k=[2]), 4)
                  if c.op == sweep.FUSED]
    assert camsuite.sweep_env(only_fused) == {}  # 2 x 64 x 1024 x 4 B: inside the default 200 MB
    big = matrix.Matrix(ops=["fused_deep_moe"], tokens=[256], hidden=[7168], top_k=[8], experts_per_rank=[4])
    demand = 4 * 256 * 64 * 7168 * 4  # L x global_bs x H x 2 x 2 (fused_deep_moe_tiling.cpp:618-625)
    assert camsuite.sweep_env(matrix.configs(big, 64)) == {"HCCL_BUFFSIZE": str(-(-demand // 2**20))}
    both = matrix.configs(matrix.Matrix(tokens=[16], hidden=[1024], top_k=[2]), 4)
    assert camsuite.sweep_env(both) == {"HCCL_BUFFSIZE": "4096"}


def test_fused_shapes_that_differ_in_batch_or_top_k_share_their_weights():
    """A sweep's fused shapes (tokens and top_k vary) build the experts' weights once (bench/perf_overhead.py:
    they were most of a fused configuration's bookkeeping); other experts or widths build new ones."""
    import dataclasses

    import camref

    case = camref.FusedCase(batch=16, hidden=1024, inter=512, experts=8, top_k=2)
    first = camref.fused_weights(1, case)
    assert camref.fused_weights(1, dataclasses.replace(case, batch=64, top_k=4)) is first
    assert camref.fused_weights(1, dataclasses.replace(case, experts=16)) is not first


def test_the_overhead_benchs_critical_path_takes_each_segments_slowest_rank():
    """Rank 0 is slow in the op, rank 1 in the reference: each segment between barriers lasts as long as its
    slowest rank, so the path is 2 x (10 + 10), not 2 x max(10 + 1, 1 + 10); the harness is not charged with
    the ranks' waits for each other (bench/perf_overhead.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
    try:
        from perf_overhead import critical_path_us
    finally:
        sys.path.pop(0)
    assert critical_path_us([[[10.0, 1.0], [10.0, 1.0]], [[1.0, 10.0], [1.0, 10.0]]]) == 40.0
    assert critical_path_us([[[5.0, 2.0]], [[4.0, 3.0]], [[6.0, 1.0]]]) == 9.0
