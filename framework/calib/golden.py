"""Fused vs the golden small ops at upstream's CASE_4RANK, judged by the suite's tolerances.

Design: docs/internals/calibration.md.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.launch.result import LaunchResult

SCRIPT = Path(__file__).with_name("golden_rank.py")
MARK = "@@camit-golden@@"
WORLD = 4
DTYPES = ("bfloat16", "float16")
SEED = 30
KEY = "cam.fused_vs_golden.case_4rank"
#: the suite's fused tolerances: upstream allclose (rtol, atol) and the norm-relative bound
SUITE_TOLERANCES = {"rtol": 0.02, "atol": 2.0, "norm_rel": 0.005}
Fact = dict[str, str]


def placement(devices: Sequence[int]) -> tuple[int, int] | None:
    """(hosts, ranks per host) for world 4 from the hosts' usable devices in env order: the fewest
    hosts that hold it; None when no NPU host can."""
    for n in (1, 2, 4):
        per = WORLD // n
        if n <= len(devices) and all(d >= per for d in devices[:n]):
            return n, per
    return None


def verdict(row: Mapping[str, Any]) -> str:
    """``holds`` or each failed check, for one dtype's worst-rank row (see the module's rule)."""
    if "error" in row:
        return f"not measured: {row['error']}"
    fails = list(filter(None, (check(row) for check in _TOLERANCE_CHECKS)))
    return "holds" if not fails else "fails: " + "; ".join(fails)


def _allclose_fails(row: Mapping[str, Any]) -> str | None:
    """Upstream's allclose: the output passes while the outside fraction is below rtol."""
    tol = SUITE_TOLERANCES
    if row["outside"] / max(row["elements"], 1) < tol["rtol"]:
        return None
    return (f"allclose(rtol {tol['rtol']}, atol {tol['atol']}): {row['outside']} of "
            f"{row['elements']} elements outside")


def _norm_fails(row: Mapping[str, Any]) -> str | None:
    """The norm-relative bound."""
    if row["norm_rel"] < SUITE_TOLERANCES["norm_rel"]:
        return None
    return f"norm-relative {row['norm_rel']:.3g} >= {SUITE_TOLERANCES['norm_rel']}"


def _counts_fail(row: Mapping[str, Any]) -> str | None:
    """Exact counts: expert_token_nums equal on every rank."""
    return None if row["counts_equal"] else "expert_token_nums differ"


#: the suite's checks of one worst-rank row, in the order the verdict names their failures
_TOLERANCE_CHECKS: tuple[Callable[[Mapping[str, Any]], str | None], ...] = (
    _allclose_fails, _norm_fails, _counts_fail)


def measured(row: Mapping[str, Any], ranks: int) -> str:
    if "error" in row:
        return "not measured"
    return (f"max_abs {row['max_abs']:.6g}, max_rel {row['max_rel']:.6g} (|golden| >= 1), "
            f"norm_rel {row['norm_rel']:.6g}, outside {row['outside']} of {row['elements']}, "
            f"counts {'equal' if row['counts_equal'] else 'differ'} (worst of {ranks} ranks)")


def worst(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ranks' rows of one dtype folded: the largest errors, any error text, counts all equal."""
    error = _first_error(rows)
    if error is not None:
        return {"error": error}
    column = {k: [r[k] for r in rows] for k in _ROW_KEYS}
    out: dict[str, Any] = {k: max(column[k]) for k in ("max_abs", "max_rel", "norm_rel")}
    out["outside"] = sum(outside[0] for outside in column["outside"])  # the first tolerance's
    out["elements"] = sum(column["elements"])
    out["counts_equal"] = all(column["counts_equal"])
    return out


#: the numbers of one rank's row for one dtype (framework.calib.golden_rank)
_ROW_KEYS = ("max_abs", "max_rel", "norm_rel", "outside", "elements", "counts_equal")


def _first_error(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The first rank's error, or that no rank answered; None when every rank measured."""
    if not rows:
        return "no rank answered"
    return next((r["error"] for r in rows if "error" in r), None)


def parse(text: str) -> list[dict[str, Any]]:
    """The ranks' answers (``MARK`` lines) in rank order; other lines are ignored."""
    rows = [doc for doc in map(_answer, text.splitlines()) if doc is not None]
    return sorted(rows, key=lambda d: int(d.get("rank", 0)))


def _answer(line: str) -> dict[str, Any] | None:
    """One rank's answer (the JSON object after ``MARK`` with its ``dtypes``), None: not one."""
    at = line.find(MARK)
    if at < 0:
        return None
    try:
        doc = json.loads(line[at + len(MARK):])
    except ValueError:
        return None
    return doc if _is_answer(doc) else None


def _is_answer(doc: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(doc, dict) and isinstance(doc.get("dtypes"), dict)


def facts(ranks: Sequence[Mapping[str, Any]], source: str, failure: str = "") -> dict[str, Fact]:
    """The two facts per dtype from the ranks' answers (``failure``: why the launch failed)."""
    out = {}
    for name in DTYPES:
        row = _dtype_row(ranks, name, failure)
        out[f"{KEY}.{name}"] = {"value": verdict(row), "source": source}
        out[f"{KEY}.{name}.measured"] = {"value": measured(row, WORLD), "source": source}
    return out


def _dtype_row(ranks: Sequence[Mapping[str, Any]], name: str, failure: str) -> dict[str, Any]:
    """The worst rank's row of dtype ``name``, or why not every rank answered for it
    (``failure``: why the launch failed)."""
    rows = [r["dtypes"][name] for r in ranks if isinstance(r["dtypes"].get(name), dict)]
    if len(rows) != WORLD:
        return {"error": failure or f"{len(rows)} of {WORLD} ranks answered"}
    return worst(rows)


def not_measured(why: str) -> dict[str, Fact]:
    return {f"{KEY}{suffix}": {"value": f"not measured: {why}", "source": "camit calibrate"}
            for name in DTYPES for suffix in (f".{name}", f".{name}.measured")}


def run(env: EnvConfig, cluster: Cluster, timeout: float = 900.0) -> dict[str, Fact]:
    """Launch the rank program on the hosts (see the module) and return its facts."""
    from framework.launch import Launcher, Target
    from framework.records.folder import RunDir

    names = [h.name for h in cluster]
    where = placement([env.hosts[n].npu.devices for n in names])
    if where is None:
        return not_measured(f"no {WORLD} NPU devices on the hosts (npu.count / npu.visible)")
    hosts = names[: where[0]]
    tol = f"{SUITE_TOLERANCES['rtol']},{SUITE_TOLERANCES['atol']}"
    target = Target(script=str(SCRIPT), args=(",".join(DTYPES), str(SEED)))
    # the launch's logs (no cores: ulimit -c 0) go to a folder removed here, never to the bundle
    with tempfile.TemporaryDirectory(prefix="camit-calib-") as tmp:
        rundir = RunDir.create(tmp)
        launcher = Launcher(env, cluster, rundir=rundir, backend="hccl", nproc_per_node=where[1],
                            core_limit="0")
        result = launcher.run(target, hosts=hosts, timeout=timeout, name="golden",
                              env={"CAMIT_GOLDEN_TOL": tol})
        text = _rank_logs(result)
    source = f"{','.join(hosts)}: fused_deep_moe vs golden small ops, world {WORLD} on hccl"
    return facts(parse(text), source, "" if result.ok else result.message()[:2000])


def _rank_logs(result: LaunchResult) -> str:
    """The ranks' logs that reached the controller, one after another."""
    logs = [Path(r.log) for r in result.ranks.values() if r.log]
    return "\n".join(log.read_text(errors="replace") for log in logs if log.is_file())
