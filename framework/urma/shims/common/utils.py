"""``common.utils`` (upstream ``test_framework/common/utils.py``): ``BaseObject``'s assertions and
parsers."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable

from framework.base_test import BaseTest as _CamitBaseTest


def get_caller_info() -> str:
    """``[ file:line ]`` of the caller's caller."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    if caller is None:
        return "[ ? ]"
    return f"[ {os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno} ]"


def parse_cpu_list(cpu_txt: str | None) -> list[int]:
    """``"1-3,7"`` -> ``[1, 2, 3, 7]``; None -> ``[]``."""
    cpus: list[int] = []
    for part in cpu_txt.split(",") if cpu_txt is not None else []:
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high) + 1) if high else [int(low)])
    return cpus


def convert_set_str_to_int(set_str: Iterable[str]) -> set[int]:
    """The members that read as integers, as integers."""
    out = set()
    for s in set_str:
        try:
            out.add(int(s))
        except ValueError:
            pass
    return out


class BaseObject:
    """Upstream's assertions (camit's, same semantics: numbers in strings compare as numbers)."""

    @staticmethod
    def adapt_factor(args1: object, args2: object) -> tuple[object, object]:
        try:
            a = float(args1) if isinstance(args1, str) else args1
            b = float(args2) if isinstance(args2, str) else args2
        except ValueError:
            return str(args1), str(args2)
        return a, b

    assertEqual = staticmethod(_CamitBaseTest.assertEqual)
    assertNotEqual = staticmethod(_CamitBaseTest.assertNotEqual)
    assertGreater = staticmethod(_CamitBaseTest.assertGreater)
    assertGreaterEqual = staticmethod(_CamitBaseTest.assertGreaterEqual)
    assertLess = staticmethod(_CamitBaseTest.assertLess)
    assertLessEqual = staticmethod(_CamitBaseTest.assertLessEqual)
    assertTrue = staticmethod(_CamitBaseTest.assertTrue)
    assertFalse = staticmethod(_CamitBaseTest.assertFalse)
    assertIn = staticmethod(_CamitBaseTest.assertIn)
    assertNotIn = staticmethod(_CamitBaseTest.assertNotIn)
