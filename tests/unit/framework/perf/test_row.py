"""The perf row: its shipped JSON Schema is the model's, rows validate against it, the bandwidth arithmetic."""

import json
from typing import Any

import jsonschema
import pytest

from framework.perf import row as perfrow
from framework.perf.row import Config, Environment, Row, build_row

ENV = Environment(cluster="lab", soc="Ascend910_9391", cann="8.2.RC1", driver="25.0.rc1",
                  op_lib_version="0.1.0", op_lib_hash="ab" * 32, hccl={"HCCL_BUFFSIZE": "200"})
CFG = Config(op="dispatch", tokens=8, hidden=4, top_k=2, experts=8, world=4, dtype="bfloat16", quant="none")
HOSTS = ["h1", "h1", "h2", "h2"]
# rank i sends 1000 bytes to each rank, 4000 to itself: total 4*(3*1000+4000), moved 12000,
# intra (same host, other rank) 4*1000, inter 4*2000
SENT = [[4000 if i == j else 1000 for j in range(4)] for i in range(4)]


def make_row(**kw):
    times = [[10.0, 10.0, 10.0, 20.0], [10.0, 10.0, 10.0, 20.0], [10.0, 12.0, 10.0, 30.0]]
    args: dict[str, Any] = dict(run_id="r1", seed=7, config=CFG, warmup=2, times_us=times, hosts=HOSTS, sent=SENT,
                environment=ENV, output_hashes=["h"] * 3, reference_us=[[40.0] * 4] * 3)
    args.update(kw)
    return build_row(**args)


def test_the_shipped_schema_is_the_models():
    assert perfrow.packaged_schema() == json.loads(json.dumps(perfrow.json_schema())), \
        "framework/data/perf-row.schema.json is stale: regenerate it from framework.perf.row.json_schema()"


def test_a_built_row_validates_against_the_schema_and_reads_back():
    r = make_row()
    doc = json.loads(r.to_json())
    jsonschema.Draft202012Validator(perfrow.packaged_schema()).validate(doc)
    assert Row.from_json(r.to_json()) == r
    assert doc["schema"] == "camit.perf.row/1" and doc["config"]["op"] == "dispatch"


@pytest.mark.parametrize("breakage", [
    lambda d: d.pop("bandwidth"),
    lambda d: d.update(extra=1),
    lambda d: d["config"].update(op="allreduce"),
    lambda d: d["ranks"][0].pop("p99"),
    lambda d: d.update(schema="camit.perf.row/0"),
])
def test_the_schema_rejects_broken_rows(breakage):
    doc = json.loads(make_row().to_json())
    breakage(doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, perfrow.packaged_schema())
    with pytest.raises(ValueError):
        Row.model_validate(doc)


def test_bandwidths_follow_nccl_tests_adapted():
    r = make_row()
    assert r.time_us.p50 == 20.0 and r.time_us.max == 30.0 and r.iterations_us == [20.0, 20.0, 30.0]
    assert r.bytes.total == 28000 and r.bytes.moved == 12000 and r.bytes.intra == 4000 and r.bytes.inter == 8000
    per_rank_s = 4 * 20e-6 * 1e9  # world x t, in GB
    assert r.bandwidth.algbw == pytest.approx(28000 / per_rank_s)
    assert r.bandwidth.busbw == pytest.approx(12000 / per_rank_s)
    assert r.bandwidth.intra == pytest.approx(4000 / per_rank_s)
    assert r.bandwidth.inter == pytest.approx(8000 / per_rank_s)
    assert r.reference is not None and r.reference.bandwidth.busbw == pytest.approx(12000 / (4 * 40e-6 * 1e9))
    assert r.speedup == pytest.approx(2.0)
    assert [(s.rank, s.host, s.max) for s in r.ranks] == [(0, "h1", 10.0), (1, "h1", 12.0), (2, "h2", 10.0),
                                                         (3, "h2", 30.0)]
    assert r.ranks[3].p50 == 20.0 and r.ranks[3].p99 == pytest.approx(29.8)


def test_uniform_routing_busbw_is_nccl_tests_alltoall_factor():
    sent = [[1000] * 4 for _ in range(4)]
    r = make_row(sent=sent, reference_us=None)
    assert r.bandwidth.busbw == pytest.approx(r.bandwidth.algbw * 3 / 4)
    assert r.reference is None and r.speedup is None


def test_wrong_shapes_are_named():
    with pytest.raises(ValueError, match="one time per rank"):
        make_row(times_us=[[1.0, 2.0]])
    with pytest.raises(ValueError, match="4 x 4"):
        make_row(sent=[[1, 2]])


def test_read_rows_names_the_bad_line():
    good = make_row().to_json()
    assert perfrow.read_rows(good + "\n\n" + good + "\n", "x.jsonl") == [make_row()] * 2
    with pytest.raises(ValueError, match=r"^x\.jsonl:2: not a perf row"):
        perfrow.read_rows(good + "\n{}\n", "x.jsonl")
