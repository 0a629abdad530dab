"""What ``camit calibrate`` asks a host: one sh script of tagged sections and one stdlib+torch
Python probe (pure: this module builds text).

Design: docs/internals/calibration.md.
"""

from __future__ import annotations

from framework import commands
from framework.preflight.probe import CANN_RECORD, MARK

#: host fact key → (section name, shell command run in the section, what it is)
HOST_FACTS: dict[str, tuple[str, str, str]] = {
    "host.npu_smi_info": ("npu-smi", "$NPUSMI info", "npu-smi info"),
    "host.npu_smi_list": ("npu-smi-l", "$NPUSMI info -l", "npu-smi info -l"),
    "host.npu_smi_board": (
        "npu-smi-board",
        "$NPUSMI info -t board -i 0",
        "npu-smi info -t board -i 0",
    ),
    "host.hccn_link": ("hccn-link", "$HCCN -i 0 -link -g", "hccn_tool -i 0 -link -g"),
    "host.hccn_net_health": (
        "hccn-health",
        "$HCCN -i 0 -net_health -g",
        "hccn_tool -i 0 -net_health -g",
    ),
    "host.msnpureport": (
        "msnpureport",
        "command -v msnpureport || { M=${D:-/usr/local/Ascend}/driver/tools/"
        'msnpureport; [ -x "$M" ] && echo "$M"; } || echo absent',
        "msnpureport on PATH or in driver/tools",
    ),
    "host.ascend_install_info": (
        "install-info",
        "cat /etc/ascend_install.info",
        "/etc/ascend_install.info",
    ),
    "host.driver_version": (
        "driver",
        'cat "${D:-/usr/local/Ascend}/driver/version.info"',
        "driver/version.info",
    ),
    "host.firmware_version": (
        "firmware",
        'cat "${F:-/usr/local/Ascend}/firmware/version.info"',
        "firmware/version.info",
    ),
    "host.cann_version": ("cann", "cann_record", f"the first */{CANN_RECORD} of the toolkit homes"),
    "host.cann_set_env": ("set_env", "set_env_state", "the env's cann.set_env"),
}


def host_script(cann_homes: list[str], set_env: str | None) -> commands.ShellScript:
    """The script one host runs: a ``@@camit@@ begin/end`` section per :data:`HOST_FACTS` entry."""
    q = commands.quote
    homes = " ".join(
        h.replace("$HOME", '"$HOME"') if h.startswith("$HOME") else q(h) for h in cann_homes
    )
    lines = [
        "exec </dev/null",
        f'sec() {{ echo {MARK} begin "$1"; eval "$2" 2>&1; _r=$?; '
        f'printf \'\\n{MARK} end %s %s\\n\' "$1" "$_r"; }}',
        "NPUSMI=$(command -v npu-smi 2>/dev/null || echo /usr/local/sbin/npu-smi)",
        "HCCN=$(command -v hccn_tool 2>/dev/null || echo /usr/local/Ascend/driver/tools/hccn_tool)",
        "D=$(sed -n 's/^Driver_Install_Path_Param=//p' /etc/ascend_install.info 2>/dev/null "
        "| head -n 1)",
        "F=$(sed -n 's/^Firmware_Install_Path_Param=//p' /etc/ascend_install.info 2>/dev/null "
        "| head -n 1)",
        f'cann_record() {{ for h in {homes}; do for f in "$h"/*-linux/{CANN_RECORD}; do '
        '[ -f "$f" ] && { echo "path=$f"; cat -- "$f"; return 0; }; done; done; '
        "echo absent; return 1; }",
        f"set_env_state() {{ f={q(set_env or '')}; "
        "[ -n \"$f\" ] || { echo 'not configured'; return 0; }; "
        'if [ -f "$f" ]; then echo "present $f"; else echo "missing $f"; return 1; fi; }',
    ]
    lines += [f"sec {section} {q(command)}" for section, command, _what in HOST_FACTS.values()]
    return commands.ShellScript("\n".join(lines) + "\n")


#: per CAM op: the contract entry (suites/cam/rank/camcontract.py key) the probe's bad call
#: breaks, and the words its refusal names the quantity by there (tests/unit/framework/test_calib.py
#: keeps these equal to the contract)
CAM_REFUSALS: dict[str, tuple[str, str]] = {
    "get_dispatch_layout": ("layout.experts_per_rank", "not divisible by numRanks"),
    "moe_dispatch_prefill": (
        "dispatch.counts_dtype",
        "numTokensPerExpert.scalar_type() == at::kInt",
    ),
    "moe_combine_prefill": ("combine.x_dim", "x.dim() == DIM_TWO and x.is_contiguous()"),
    "fused_deep_moe": ("fused.x_dim", "x.dim() == DIM_TWO"),
}

#: the torch_npu probe (stdlib + torch; run by the host's python): one JSON object, fact → value
TORCH_PROBE = r"""
import json, os, sys
facts = {}
def fact(key, fn):
    try:
        facts[key] = str(fn())
    except BaseException as exc:  # the error is the fact
        facts[key] = type(exc).__name__ + ": " + str(exc)
def _imp():
    import torch, torch_npu
    return torch_npu.__version__
fact("torch_npu.version", _imp)
try:
    import torch, torch_npu
except BaseException:
    torch = None
def _mix():
    a = torch.ones(2).npu(); b = torch.ones(2)
    return "no error: " + str((a + b).device)
def _numpy():
    return "no error: " + str(torch.ones(2).npu().numpy())
def _allreduce():
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    return "no error: " + str(t.tolist())
def _op_timeout():
    npu = torch_npu.npu
    getter = getattr(npu, "get_op_timeout_ms", None) or getattr(npu, "get_op_execute_timeout", None)
    if getter is not None:
        return getter()
    setter = "present" if hasattr(npu, "set_op_timeout_ms") else "absent"
    return "not readable (set_op_timeout_ms: %s)" % setter
def _cann():
    return torch_npu.npu.get_cann_version()
def _cam_version():
    from importlib import metadata
    return metadata.version("umdk_cam_op_lib")  # the real wheel has no __version__
def _npu(*shape, dtype=None):
    return torch.zeros(*shape, dtype=dtype or torch.float32).npu()
def _cam_get_dispatch_layout(cam):
    return cam.get_dispatch_layout(_npu(4, 2, dtype=torch.int64), 7, 2)
def _cam_moe_dispatch_prefill(cam):
    x, idx = _npu(4, 1024, dtype=torch.bfloat16), _npu(4, 2, dtype=torch.int64)
    return cam.moe_dispatch_prefill(x, idx, _npu(4, 2), _npu(8), _npu(4, 2, dtype=torch.int32),
                                    "", 0, 2, False)
def _cam_moe_combine_prefill(cam):
    x, idx = _npu(1024, dtype=torch.bfloat16), _npu(4, 2, dtype=torch.int64)
    return cam.moe_combine_prefill(x, idx, _npu(4, 2),
                                   _npu(8, dtype=torch.int32), _npu(8, dtype=torch.int32), "", 0, 2)
def _cam_fused_deep_moe(cam):
    w = [_npu(1, 1)]
    x, ids = _npu(1024, dtype=torch.bfloat16), _npu(4, 2, dtype=torch.int32)
    return cam.fused_deep_moe(x, ids, w, w, w, w, _npu(4, 2), None, None, None, None, None, None,
                              None, "", 2, 0, 8, 0, 8)
def _refusal(call):
    def run():
        import umdk_cam_op_lib as cam
        return "no error: %r" % (call(cam),)
    return run
if torch is not None:
    fact("torch_npu.mix_device_error", _mix)
    fact("torch_npu.numpy_error", _numpy)
    fact("torch_npu.cpu_allreduce_error", _allreduce)
    fact("torch_npu.op_execute_timeout", _op_timeout)
    fact("torch_npu.cann_version", _cann)
for name in ("HCCL_BUFFSIZE", "HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT"):
    facts["hccl.env." + name] = os.environ.get(name, "unset")
fact("cam.version", _cam_version)
for _op in ("get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill", "fused_deep_moe"):
    fact("cam.refusal." + _op, _refusal(globals()["_cam_" + _op]))
sys.stdout.write("@@camit-calib@@" + json.dumps(facts, sort_keys=True) + "\n")
sys.stdout.flush()
os._exit(0)
"""
