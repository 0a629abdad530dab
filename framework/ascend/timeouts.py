"""The launch's timeouts, in the order that lets HCCL report a hang before camit kills it (pure).

``HCCL_CONNECT_TIMEOUT`` < ``HCCL_EXEC_TIMEOUT`` < process-group (watchdog) timeout < case timeout;
why, with the upstream files each fact mirrors: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: CANN's lower bound (and default) of HCCL_CONNECT_TIMEOUT, seconds
CONNECT_MIN = 120
#: torch_npu's exec timeout when HCCL_EXEC_TIMEOUT is unset (ProcessGroupHCCL.cpp: defaultExecTimeout)
EXEC_DEFAULT = 1836
#: the variable the rank side reads for init_process_group's timeout (suites/cam/rank/conftest.py)
PG_TIMEOUT_VAR = "CAMIT_PG_TIMEOUT"
#: shortest case timeout for which the order holds with the connect timeout at CANN's minimum
MIN_CASE = 140.0
KEYS = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", PG_TIMEOUT_VAR)


@dataclass(frozen=True)
class Timeouts:
    """Seconds: HCCL's connect and exec timeouts, the process-group timeout, the case timeout."""

    connect: int
    exec: int
    pg: int
    case: float
    #: why the order could not hold (a case timeout below MIN_CASE), else None
    note: str | None = None

    def env(self) -> dict[str, str]:
        return {"HCCL_CONNECT_TIMEOUT": str(self.connect), "HCCL_EXEC_TIMEOUT": str(self.exec),
                PG_TIMEOUT_VAR: str(self.pg)}


def derive(case_timeout: float) -> Timeouts:
    """The ordered timeouts for a launch bounded by ``case_timeout`` seconds.

    The process group gets the case timeout less a tenth (at least 10 s, at most half, so camit's
    kill comes last); the exec timeout sits two thirds of the way from the connect timeout to it.
    Below :data:`MIN_CASE` the connect timeout cannot stay under the exec timeout (CANN's minimum
    is 120 s): the exec timeout then sits at two thirds of the process-group timeout and
    :attr:`Timeouts.note` says why the order is broken.
    """
    pg = max(1, math.floor(case_timeout - min(max(10.0, case_timeout / 10), case_timeout / 2)))
    if case_timeout >= MIN_CASE:
        return Timeouts(CONNECT_MIN, CONNECT_MIN + (pg - CONNECT_MIN) * 2 // 3, pg, case_timeout)
    note = (f"case timeout {case_timeout:g}s is too short to keep HCCL_CONNECT_TIMEOUT ({CONNECT_MIN}s, CANN's "
            f"minimum) below HCCL_EXEC_TIMEOUT; give at least {MIN_CASE:g}s")
    return Timeouts(CONNECT_MIN, max(1, pg * 2 // 3), pg, case_timeout, note)


def _seconds(value: object) -> float | None:
    """The number in a variable's value as C's strtol reads it (leading digits), else None."""
    text = str(value).strip()
    digits = ""
    for i, ch in enumerate(text):
        if ch.isdigit() or (i == 0 and ch in "+-"):
            digits += ch
        else:
            break
    try:
        return float(int(digits))
    except ValueError:
        return None


def _effective(given: Mapping[str, float | None], case_timeout: float | None) -> dict[str, float]:
    """The timeouts in effect: camit's derived ones (CANN's defaults without a case timeout), then ``given``."""
    base: dict[str, float] = {"HCCL_CONNECT_TIMEOUT": float(CONNECT_MIN), "HCCL_EXEC_TIMEOUT": float(EXEC_DEFAULT)}
    if case_timeout is not None:
        base = {k: float(v) for k, v in derive(case_timeout).env().items()}
    return {**base, **{k: v for k, v in given.items() if v is not None}}


def _order_breaks(chain: list[tuple[str, float]], given: Mapping[str, float | None], where: str) -> list[str]:
    """Each neighbour pair of ``chain`` out of order where ``given`` sets one of the two (named by its key)."""
    out = []
    for (lo, lo_v), (hi, hi_v) in zip(chain, chain[1:], strict=False):
        if lo_v >= hi_v and (lo in given or hi in given):
            key = hi if hi in given else lo
            out.append(f"{where}.{key}: {lo} ({lo_v:g}s) must be below {hi} ({hi_v:g}s) so that HCCL reports "
                       "a hang before it is killed (order: HCCL_CONNECT_TIMEOUT < HCCL_EXEC_TIMEOUT < "
                       f"{PG_TIMEOUT_VAR} < case timeout)")
    return out


def order_problems(values: Mapping[str, object], case_timeout: float | None = None,
                   where: str = "launch.env") -> list[str]:
    """What in ``values`` breaks connect < exec < process-group < case; each message names its key path.

    Only the variables ``values`` sets are judged (against camit's derived value, or CANN's default
    where no case timeout is known, for the others).
    """
    given = {k: _seconds(values[k]) for k in KEYS if k in values}
    if not given:
        return []
    out = [f"{where}.{k}: {values[k]!r} is not a number of seconds" for k, v in given.items() if v is None]
    if given.get("HCCL_EXEC_TIMEOUT") == 0:
        return [*out, f"{where}.HCCL_EXEC_TIMEOUT: {_EXEC_NEVER}"]
    return out + _order_breaks(_chain(_effective(given, case_timeout), case_timeout), given, where)


_EXEC_NEVER = ("0 means never: a hung collective waits for the watchdog or camit's case timeout "
               "and HCCL writes no plog diagnosis (torch_npu warns that the plog may not be "
               "recorded)")


def _chain(eff: Mapping[str, float], case_timeout: float | None) -> list[tuple[str, float]]:
    """The timeouts in the order they must hold, shortest first (the case timeout last, if any)."""
    chain = [(k, eff[k]) for k in KEYS if k in eff]
    if case_timeout is not None:
        chain.append(("case timeout", case_timeout))
    return chain
