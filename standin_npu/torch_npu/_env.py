"""What the stand-in reads from the environment: the emulated host, visible devices, timeouts,
log level.

The variables: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

DEFAULT_DEVICE_COUNT = 16
DEFAULT_EXEC_TIMEOUT = 1836  # torch_npu ProcessGroupHCCL.cpp: defaultExecTimeout
DEFAULT_CONNECT_TIMEOUT = 120  # CANN HCCL_CONNECT_TIMEOUT default
MAX_VISIBLE = 64  # torch_npu/npu/__init__.py: no ASCEND_RT_VISIBLE_DEVICES -> range(64)

_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """TORCH_NPU_WARN_ONCE: a UserWarning the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def strtol(text: str | None) -> int | None:
    """C ``strtol(text, nullptr, 10)``: leading blanks, a sign, digits; no digits -> 0; None -> None."""
    if text is None:
        return None
    s = text.lstrip()
    sign = 1
    if s[:1] in "+-" and s[:1]:
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    digits = ""
    for ch in s:
        if not ch.isdigit():
            break
        digits += ch
    return sign * int(digits) if digits else 0


def _emu_file() -> dict[str, Any]:
    path = os.environ.get("CAMIT_EMU_NPU")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"CAMIT_EMU_NPU={path}: cannot read the emulated NPU host file: {exc}") from exc
    if not isinstance(data, dict):
        raise RuntimeError(f"CAMIT_EMU_NPU={path}: expected a JSON object")
    return data


def _setting(env: str, key: str, default: Any) -> Any:
    if os.environ.get(env):
        return os.environ[env]
    return _emu_file().get(key, default)


def raw_device_count() -> int:
    """The emulated host's NPU count (what ``drvGetDevNum`` would report)."""
    value = _setting("CAMIT_EMU_NPU_COUNT", "device_count", DEFAULT_DEVICE_COUNT)
    try:
        return max(0, int(value))
    except (TypeError, ValueError) as exc:
        raise RuntimeError(f"emulated NPU count {value!r} is not an integer") from exc


def visible_devices() -> list[int]:
    """ASCEND_RT_VISIBLE_DEVICES as torch_npu parses it (torch_npu/npu/__init__.py, _parse_visible_devices):
    unset -> 0..63; digits and commas only, parsing stops at the first other character; an empty
    element ends the list."""
    var = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if var is None:
        return list(range(MAX_VISIBLE))
    end = len(var)
    for idx, ch in enumerate(var):
        if not (ch.isdigit() or ch == ","):
            end = idx
            break
    out: list[int] = []
    for elem in var[:end].split(","):
        if not elem:
            return out
        out.append(int(elem))
    return out


def device_count() -> int:
    """Visible devices on the emulated host (torch_npu/npu/__init__.py, _device_count_ascend_hal): the
    list must ascend (else 0) and is cut at the first id the host does not have."""
    visible = visible_devices()
    raw = raw_device_count()
    if not visible or raw <= 0:
        return 0
    for idx, val in enumerate(visible):
        if idx > 0 and val <= visible[idx - 1]:
            return 0
        if val >= raw:
            return idx
    return len(visible)


def physical_id(logical: int) -> int:
    """The host's NPU id behind logical device ``logical``."""
    if os.environ.get("ASCEND_RT_VISIBLE_DEVICES") is None:
        return logical
    visible = visible_devices()
    return visible[logical] if 0 <= logical < len(visible) else logical


def exec_timeout() -> int:
    """HCCL_EXEC_TIMEOUT in seconds, 0 = never (torch_npu OptionsManager::GetHCCLExecTimeout, then
    ProcessGroupHCCL's default of 1836 for a missing or negative value)."""
    value = strtol(os.environ.get("HCCL_EXEC_TIMEOUT"))
    if value is not None and value < 0:
        warn_once("exec<0", "Get env HCCL_EXEC_TIMEOUT less than 0, so reset it to the default value.")
        value = None
    return DEFAULT_EXEC_TIMEOUT if value is None else value


def connect_timeout() -> int:
    """HCCL_CONNECT_TIMEOUT in seconds (OptionsManager::GetHCCLConnectTimeout gives 0 when unset, and HCCL
    then uses its default of 120)."""
    value = strtol(os.environ.get("HCCL_CONNECT_TIMEOUT")) or 0
    return value if value > 0 else DEFAULT_CONNECT_TIMEOUT


def async_error_handling() -> int:
    """TORCH_HCCL_ASYNC_ERROR_HANDLING (deprecated HCCL_ASYNC_ERROR_HANDLING), default 1 = TearDown
    (OptionsManager::CheckUseHcclAsyncErrorHandleEnable)."""
    raw = os.environ.get("TORCH_HCCL_ASYNC_ERROR_HANDLING")
    if raw is None:
        raw = os.environ.get("HCCL_ASYNC_ERROR_HANDLING")
        if raw is not None:
            warn_once("async-deprecated", "HCCL_ASYNC_ERROR_HANDLING is deprecated, "
                      "please use TORCH_HCCL_ASYNC_ERROR_HANDLING instead.")
    value = strtol(raw)
    value = 1 if value is None else value
    if value not in (0, 1, 2, 3):
        raise RuntimeError("TORCH_HCCL_ASYNC_ERROR_HANDLING should be 0, 1, 2, or 3.")
    return value


def global_log_level() -> int:
    """ASCEND_GLOBAL_LOG_LEVEL: 0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR (default), 4 NULL."""
    value = strtol(os.environ.get("ASCEND_GLOBAL_LOG_LEVEL"))
    return 3 if value is None or not 0 <= value <= 4 else value


def rank_id() -> int:
    """The RankID torch_npu prints in its error suffix (the RANK of the launcher, else -1)."""
    value = strtol(os.environ.get("RANK"))
    return -1 if value is None else value
