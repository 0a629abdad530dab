"""The perf history file: runs recorded and read back as series, migrations, verdicts per run;
``camit perf compare`` on two runs' rows."""

import json
import random
import sqlite3

import pytest

from framework.cli import main
from framework.perf import compare as perfcompare
from framework.perf.history import MIGRATIONS, VERSION, History, RunKey, path_for
from framework.perf.matrix import Op
from framework.perf.row import Config, build_row
from tests.unit.framework.perf.test_row import ENV, HOSTS, SENT


def _key(i, lib="1.0", cann="8.2"):
    return RunKey(run_id=f"run{i:04d}", cluster="lab", soc="910_93", cann=cann, op_lib_version=lib)


def _fill(h, n, step_at=None, seed=0):
    rng = random.Random(seed)
    for i in range(n):
        lib = "1.1" if step_at is not None and i >= step_at else "1.0"
        slow = 1.1 if step_at is not None and i >= step_at else 1.0
        h.record(_key(i, lib), {("prefill.w8", "dispatch_us"): 100 * slow * (1 + rng.gauss(0, 0.03)),
                                ("prefill.w8", "dispatch_gbps"): 10 / slow * (1 + rng.gauss(0, 0.03))})


def test_a_step_is_named_with_its_run_and_op_library(tmp_path):
    with History(path_for(tmp_path, "lab")) as h:
        _fill(h, 40, step_at=30)
        verdicts = h.assess_run(_key(39, "1.1"), higher_is_better={"dispatch_gbps"})
    assert set(verdicts) == {("prefill.w8", "dispatch_us"), ("prefill.w8", "dispatch_gbps")}
    for v in verdicts.values():
        assert v.regression and v.at is not None and abs(v.at - 30) <= 1
    text = verdicts[("prefill.w8", "dispatch_us")].describe("prefill.w8 dispatch_us")
    assert "op-lib 1.1" in text and "of 40" in text


def test_noise_only_and_other_keys_do_not_mix(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        _fill(h, 40, seed=3)
        h.record(_key(99, cann="9.0"), {("prefill.w8", "dispatch_us"): 500.0})  # another CANN: its own series
        assert not any(v.regression for v in h.assess_run(_key(39)).values())
        assert len(h.series(_key(0), "prefill.w8", "dispatch_us").values) == 40
        assert h.series(_key(0, cann="9.0"), "prefill.w8", "dispatch_us").values == [500.0]


def test_an_accepted_run_ends_the_alarm(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        _fill(h, 40, step_at=30)
        h.record(_key(40, "1.1"), {("prefill.w8", "dispatch_us"): 110.0}, accepted=True)
        h.record(_key(41, "1.1"), {("prefill.w8", "dispatch_us"): 110.5})
        assert not h.assess_run(_key(41, "1.1"))[("prefill.w8", "dispatch_us")].regression


def test_a_version_1_file_is_migrated_and_a_newer_one_refused(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    for sql in MIGRATIONS[0]:
        db.execute(sql)
    db.execute("INSERT INTO runs VALUES (1, 'r1', 'lab', 'soc', 'cann', '1.0', 0)")
    db.execute("INSERT INTO results VALUES (1, 'c', 'm', 42.0)")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with History(path) as h:
        assert h.version == VERSION == 2
        s = h.series(RunKey("r1", "lab", "soc", "cann", "1.0"), "c", "m")
        assert s.values == [42.0] and s.since == 0
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="schema version 99 is newer"):
        History(path)


def _rows(path, shift, seed):
    rng = random.Random(seed)
    lines = []
    runs: tuple[tuple[Op, int], ...] = (("dispatch", 8), ("combine", 8), ("dispatch", 16))
    for op, tokens in runs:
        cfg = Config(op=op, tokens=tokens, hidden=4, top_k=2, experts=8, world=4, dtype="bfloat16", quant="none")
        slow = shift if (op, tokens) == ("dispatch", 16) else 1.0
        times = [[100 * slow * (1 + rng.gauss(0, 0.02)) for _ in HOSTS] for _ in range(30)]
        lines.append(build_row(run_id=path.name, seed=1, config=cfg, warmup=2, times_us=times, hosts=HOSTS,
                               sent=SENT, environment=ENV, output_hashes=["h"] * 30).to_json())
    path.mkdir()
    (path / perfcompare.ROWS).write_text("\n".join(lines) + "\n")
    return path


def test_compare_finds_the_one_changed_configuration(tmp_path, capsys):
    a, b = _rows(tmp_path / "A", 1.0, 1), _rows(tmp_path / "B", 1.1, 2)
    out = tmp_path / "out"
    assert main(["perf", "compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 configuration(s), 1 significant change(s)" in printed
    doc = json.loads((out / "perf-compare.json").read_text())
    sig = {c["config"]: c["significant"] for c in doc["configurations"]}
    assert sig == {"dispatch.t16.h4.k2.e8.w4.bfloat16.none": True, "dispatch.t8.h4.k2.e8.w4.bfloat16.none": False,
                   "combine.t8.h4.k2.e8.w4.bfloat16.none": False}
    changed = next(c for c in doc["configurations"] if c["significant"])
    assert changed["delta"] == pytest.approx(0.10, abs=0.03) and changed["note"] == "slower"
    md = (out / "perf-compare.md").read_text()
    assert "| dispatch.t16.h4.k2.e8.w4.bfloat16.none |" in md and "| yes |" in md


def test_compare_lists_one_sided_configurations_and_names_a_bad_file(tmp_path, capsys):
    a = _rows(tmp_path / "A", 1.0, 1)
    b = tmp_path / "b.jsonl"
    b.write_text((a / perfcompare.ROWS).read_text().splitlines()[0] + "\n")
    deltas = perfcompare.compare(perfcompare.load_run(a), perfcompare.load_run(b))
    assert sorted(d.note for d in deltas) == ["", "only in A", "only in A"]
    b.write_text("{\"schema\": 1}\n")
    assert main(["perf", "compare", str(a), str(b), "--out", str(tmp_path)]) == 2
    assert f"{b}:1: not a perf row" in capsys.readouterr().err


def test_workers_of_one_run_add_their_configurations(tmp_path):
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        h.record(_key(0), {("prefill.world2", "dispatch_us"): 1.0})
        h.record(_key(0), {("prefill.world4", "dispatch_us"): 2.0})
        h.record(_key(0), {("prefill.world4", "dispatch_us"): 3.0})
        assert h.configs(_key(0)) == [("prefill.world2", "dispatch_us"), ("prefill.world4", "dispatch_us")]
        assert h.series(_key(0), "prefill.world4", "dispatch_us").values == [3.0]


def test_record_and_judge_fails_a_step_and_the_margin_overrides(tmp_path):
    from framework.perf.history import record_and_judge

    path = tmp_path / "lab.perf.sqlite"
    rng = random.Random(5)
    for i in range(30):
        slow = 1.1 if i >= 22 else 1.0
        numbers = {"dispatch_us": 100 * slow * (1 + rng.gauss(0, 0.03)), "dispatch_bytes_per_s": 1e9}
        problems = record_and_judge(path, _key(i), "prefill.world2", numbers,
                                    higher_is_better={"dispatch_bytes_per_s"})
        assert i >= 22 or problems == [], (i, problems)  # before the step: noise only
    assert len(problems) == 1 and "prefill.world2 dispatch_us: regression by change point at point 2" in problems[0]
    assert " of 30: " in problems[0] and any(f"at point {p} " in problems[0] for p in (21, 22, 23))
    assert record_and_judge(path, _key(30), "prefill.world2", {"dispatch_us": 111.0}, margin=0.5) == []


def test_compare_puts_a_configuration_only_b_has_in_bs_columns(tmp_path):
    rows = perfcompare.load_run(_rows(tmp_path / "A", 1.0, 1))
    key, row = next(iter(rows.items()))
    (delta,) = perfcompare.compare({}, {key: row})
    assert (delta.note, delta.a_us, delta.b_us) == ("only in B", None, row.time_us.p50)
    assert (delta.a_busbw, delta.b_busbw, delta.significant) == (None, row.bandwidth.busbw, False)
