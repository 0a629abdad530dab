"""The op stand-in's time model (standin/umdk_cam_op_lib/_timing.py): its arithmetic, its knobs, its wait,
and that the perf row's arithmetic turns modelled times back into the model's bandwidth and slow rank."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from framework.perf import sweep
from framework.perf.row import Config, Environment, build_row

STANDIN = str(Path(__file__).resolve().parents[3] / "standin")
if STANDIN not in sys.path:
    sys.path.insert(0, STANDIN)

from umdk_cam_op_lib import _timing  # noqa: E402

ENV = Environment(cluster="c", soc="s", cann="x", driver="d", op_lib_version="v", op_lib_hash="h", hccl={})


def test_the_model_is_bytes_over_bandwidth_plus_latency_times_the_slow_factor():
    m = _timing.Model(bw_gbps=0.5, latency_us=20.0, slow={3: 1.1})
    assert m.duration_s(1_000_000, 0) == pytest.approx(1e6 / 0.5e9 + 20e-6)
    assert m.duration_s(1_000_000, 3) == pytest.approx((1e6 / 0.5e9 + 20e-6) * 1.1)
    assert _timing.row_bytes(tokens=16, top_k=2, hidden=1024, element_size=2) == 65536


def test_the_knobs_are_read_and_bad_values_named():
    assert _timing.from_env({}) is None
    got = _timing.from_env({_timing.BW: "2.5", _timing.LATENCY: "15", _timing.SLOW: "3:1.1, 5:1.25"})
    assert got == _timing.Model(bw_gbps=2.5, latency_us=15.0, slow={3: 1.1, 5: 1.25})
    assert _timing.from_env({_timing.BW: "1", _timing.LATENCY: "0"}) == _timing.Model(1.0)
    bad = [({_timing.BW: "fast"}, "CAMIT_STANDIN_OP_BW_GBPS='fast': not a positive number"),
           ({_timing.BW: "-1"}, "CAMIT_STANDIN_OP_BW_GBPS='-1': not a positive number"),
           ({_timing.BW: "1", _timing.LATENCY: "nan"}, "CAMIT_STANDIN_OP_LATENCY_US='nan'"),
           ({_timing.BW: "1", _timing.SLOW: "3=1.1"}, "CAMIT_STANDIN_SLOW_RANKS: item '3=1.1' is not rank:factor"),
           ({_timing.BW: "1", _timing.SLOW: "3:0"}, "CAMIT_STANDIN_SLOW_RANKS rank 3 factor='0'"),
           ({_timing.SLOW: "3:1.1"}, "CAMIT_STANDIN_SLOW_RANKS set without CAMIT_STANDIN_OP_BW_GBPS")]
    for environ, message in bad:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            _timing.from_env(environ)


def test_pace_waits_for_the_modelled_end_only_when_asked(monkeypatch, capsys):
    for k in sweep.STANDIN_KNOBS:
        monkeypatch.delenv(k, raising=False)
    t0 = time.perf_counter()
    _timing.pace("op", t0, 10**12, 0)  # unset: a terabyte takes no time
    assert time.perf_counter() - t0 < 0.01
    _timing.pace("op", t0 - 1.0, 10**12, 0)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(_timing.BW, "0.001")  # 30 000 B at 1 MB/s: 30 ms, on rank 1 twice that
    monkeypatch.setenv(_timing.SLOW, "1:2")
    t0 = time.perf_counter()
    _timing.pace("op", t0, 30_000, 0)
    assert 0.030 <= time.perf_counter() - t0 < 0.5  # a loaded box wakes late, never early
    t0 = time.perf_counter()
    _timing.pace("op", t0, 30_000, 1)
    assert 0.060 <= time.perf_counter() - t0 < 0.5
    t0 = time.perf_counter()
    _timing.pace("op", t0 - 1.0, 30_000, 0)  # the work took a second already: no wait, and it is said
    assert time.perf_counter() - t0 < 0.01
    assert "stand-in op: rank 0: the op's own work took 100" in capsys.readouterr().err
    monkeypatch.setenv(_timing.BW, "zero")
    with pytest.raises(RuntimeError, match="stand-in moe_dispatch_prefill: CAMIT_STANDIN_OP_BW_GBPS='zero'"):
        _timing.pace("moe_dispatch_prefill", t0, 1, 0)


@pytest.mark.parametrize("op", ["dispatch", "combine"])
def test_the_rows_arithmetic_gives_back_the_model(op):
    """Ranks timed exactly as the model says: the row's algbw is the model's S / time, and a 10 % slow rank
    is the straggler x1.10 and the row's time."""
    world, tokens, hidden, top_k, experts = 4, 64, 1024, 2, 8
    rng = np.random.default_rng(7)
    rows = [np.bincount(rng.integers(0, experts, (tokens, top_k)).ravel() // (experts // world),
                        minlength=world).tolist() for _ in range(world)]
    sent = [[rows[i][j] * hidden * sweep.ELEMENT_BYTES["bfloat16"] for j in range(world)] for i in range(world)]
    if op == "combine":
        sent = [list(c) for c in zip(*sent)]
    s_bytes = _timing.row_bytes(tokens, top_k, hidden, 2)
    model = _timing.Model(bw_gbps=0.5, latency_us=30.0, slow={2: 1.1})
    times = [[model.duration_s(s_bytes, r) * 1e6 for r in range(world)] for _ in range(5)]
    hosts = ["h1", "h1", "h2", "h2"]
    cfg = Config(op=op, tokens=tokens, hidden=hidden, top_k=top_k, experts=experts, world=world,
                 dtype="bfloat16", quant="none")
    row = build_row(run_id="r", seed=1, config=cfg, warmup=0, times_us=times, hosts=hosts, sent=sent,
                    environment=ENV, output_hashes=["x"] * 5)
    assert row.bytes.total == world * s_bytes  # the model's bytes are the row's S
    plain = s_bytes / (s_bytes / 0.5e9 + 30e-6) / 1e9
    assert row.bandwidth.algbw == pytest.approx(plain / 1.1)
    assert row.straggler == "straggler: rank 2 on h2 x1.10 the median rank"


def test_the_sweep_forwards_only_the_time_knobs():
    environ = {"CAMIT_STANDIN_OP_BW_GBPS": "1", "CAMIT_STANDIN_SLOW_RANKS": "3:1.1", "CAMIT_STANDIN_SEED": "4",
               "PATH": "/bin"}
    assert sweep.standin_env(environ) == {"CAMIT_STANDIN_OP_BW_GBPS": "1", "CAMIT_STANDIN_SLOW_RANKS": "3:1.1"}
    assert set(sweep.STANDIN_KNOBS) == {_timing.BW, _timing.LATENCY, _timing.SLOW}
