"""The sweep's matrix (named, from a file, inside the contract) and its rows from the ranks' documents."""

import json

import jsonschema
import pytest

from framework.perf import matrix, sweep
from framework.perf.row import packaged_schema


def test_named_matrices_and_the_contract_filter():
    quick = matrix.load("quick")
    cfgs = matrix.configs(quick, 4)
    assert {c.op for c in cfgs} == {"dispatch", "combine"} and all(c.experts == 8 and c.world == 4 for c in cfgs)
    assert len(matrix.configs(matrix.load("nightly"), 16)) == 2 * 4 * 2 * 2 * 2
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
    cfgs = matrix.configs(matrix.Matrix(tokens=[16], hidden=[1024], top_k=[2]), 4)
    assert sweep.spec(cfgs, 1, 6) == "1;6;16:1024:2:8"
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
