"""Shared helpers: error forms, environment facts, garbage fills, rank exchange.

Written from the upstream UMDK sources (facts only); see DECISIONS.md.
"""
import os
import re
import sys

import torch

# ---------------------------------------------------------------------------
# Error forms
# ---------------------------------------------------------------------------
# torch_bind_exception.h: TorchBindException message =
#   "Failed: " + name + " error " + __FILE__ + ":" + line +
#   " error message or error code is '" + #cond + "'"
# name is "Assertion" (TORCH_BIND_ASSERT).  __FILE__ is the pybind source file
# path; we use its repository-relative path.
PYBIND_DIR = "src/cam/comm_operator/pybind/"


class TorchBindException(RuntimeError):
    """RuntimeError raised where upstream's TORCH_BIND_ASSERT throws."""


def bind_assert(cond, fname, line, text):
    if not cond:
        raise TorchBindException(
            "Failed: Assertion error %s%s:%d error message or error code is '%s'"
            % (PYBIND_DIR, fname, line, text))


class AclnnCallFailed(RuntimeError):
    """RuntimeError raised where upstream's EXEC_NPU_CMD TORCH_CHECK fails."""


def aclnn_fail(api, msgs):
    # pytorch_npu_helper.hpp EXEC_NPU_CMD:
    #   TORCH_CHECK(workspace_status == 0, "call " #aclnn_api " failed, detail:", aclGetRecentErrMsg())
    # The tiling OPS_LOG_E reports carry error code EZ9999 (ops_log.h).
    detail = "EZ9999: Inner Error!\n" + "\n".join(msgs)
    raise AclnnCallFailed("call %s failed, detail:%s" % (api, detail))


class TilingError(Exception):
    def __init__(self, *msgs):
        super().__init__(msgs[0] if msgs else "")
        self.msgs = list(msgs)

    def chain(self, msg):
        self.msgs.append(msg)
        return self


def run_tiling(api, fn, *args):
    try:
        return fn(*args)
    except TilingError as e:
        aclnn_fail(api, e.msgs)


# ---------------------------------------------------------------------------
# Environment facts
# ---------------------------------------------------------------------------
MB = 1024 * 1024
FORMAT_FRACTAL_NZ = 29


def max_window_size():
    """Mc2TilingUtils::GetMaxWindowSize (mc2_tiling_utils.h): HCCL_BUFFSIZE in MB,
    default 200, parsed with std::stoi into a uint16_t."""
    size = 200
    env = os.environ.get("HCCL_BUFFSIZE")
    if env is not None:
        m = re.match(r"^[ \t\n\r\f\v]*([+-]?\d+)", env)
        if m:
            v = int(m.group(1))
            if -2 ** 31 <= v < 2 ** 31:
                size = v & 0xFFFF
    return size * MB


def npu_format(t):
    if t is None:
        return 2
    try:
        import torch_npu  # noqa: F401  (lazy)
        fn = getattr(torch_npu, "get_npu_format", None)
        if fn is None:
            return 2
        return int(fn(t))
    except ImportError:
        return 2
    except Exception:
        return 2


def is_nz(t):
    return npu_format(t) == FORMAT_FRACTAL_NZ


# Test hook: the cleanroom tests run on plain CPU tensors.
ALLOW_HOST_TENSORS = False


def check_device(name, t):
    """The real kernels read/write device memory; refuse host tensors."""
    if t is None or ALLOW_HOST_TENSORS:
        return
    if not isinstance(t, torch.Tensor):
        return
    # lab interface (added by camit's integration, not by this library's author): the torch_npu stand-in
    # hands a kernel the host side of its npu arguments and tells them apart with _tensor.is_device
    standin = sys.modules.get("torch_npu")
    is_device = getattr(getattr(standin, "_tensor", None), "is_device", None) if standin is not None else None
    if is_device is not None and getattr(standin, "STANDIN", False):
        if not is_device(t):
            raise RuntimeError(
                "%s must be an NPU device tensor, but got a tensor on device '%s'" % (name, t.device))
        return
    if t.device.type == "cpu":
        raise RuntimeError(
            "%s must be an NPU device tensor, but got a tensor on device '%s'" % (name, t.device))


def device_fault(what):
    """Out-of-bounds device memory access by the real kernel."""
    try:
        import torch_npu
        if getattr(torch_npu, "STANDIN", False):
            torch_npu.npu._standin_fault(507035)
    except ImportError:
        pass
    raise RuntimeError("device kernel memory fault (507035): " + what)


def resolve_group(group_ep):
    if isinstance(group_ep, (bytes, bytearray)):
        group_ep = bytes(group_ep).decode("utf-8")
    import torch_npu
    return torch_npu.distributed.resolve_hccl_comm_name(group_ep)


# ---------------------------------------------------------------------------
# Garbage (uninitialised device memory)
# ---------------------------------------------------------------------------
def garbage(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    info = torch.iinfo(dtype)
    # alternating huge positive / huge negative pattern
    t = torch.full(shape, info.max, dtype=dtype, device=device)
    flat = t.view(-1)
    if flat.numel() > 1:
        flat[1::2] = info.min
    return t


# ---------------------------------------------------------------------------
# Rank exchange (variable sized all-to-all over torch.distributed)
# ---------------------------------------------------------------------------
def _to_bytes(t):
    flat = torch.empty(t.numel(), dtype=t.dtype, device=t.device)
    flat.copy_(t.reshape(-1))
    t = flat
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8, device=t.device)
    return t.view(torch.uint8)


def alltoallv_bytes(group, world, rank, outgoing, device):
    """outgoing[d] is a 1-D uint8 tensor for rank d. Returns incoming[s] from rank s."""
    import torch.distributed as dist
    sizes = torch.tensor([int(o.numel()) for o in outgoing], dtype=torch.int64, device=device)
    all_sizes = [torch.empty_like(sizes) for _ in range(world)]
    dist.all_gather(all_sizes, sizes, group=group)
    all_sizes = [s.cpu().tolist() for s in all_sizes]
    totals = [sum(s) for s in all_sizes]
    maxlen = max(max(totals), 1)
    buf = torch.zeros(maxlen, dtype=torch.uint8, device=device)
    if totals[rank]:
        buf[:totals[rank]] = torch.cat([o.to(device) for o in outgoing])
    gathered = [torch.empty_like(buf) for _ in range(world)]
    dist.all_gather(gathered, buf, group=group)
    incoming = []
    for s in range(world):
        off = sum(all_sizes[s][:rank])
        incoming.append(gathered[s][off:off + all_sizes[s][rank]])
    return incoming


def pack(tensors):
    return torch.cat([_to_bytes(t) for t in tensors]) if tensors else torch.empty(0, dtype=torch.uint8)


def unpack(buf, specs):
    """specs: list of (shape, dtype). Returns tensors viewing copies of buf."""
    out = []
    off = 0
    for shape, dtype in specs:
        n = 1
        for d in shape:
            n *= d
        nbytes = n * torch.empty(0, dtype=dtype).element_size()
        chunk = buf[off:off + nbytes].clone()
        off += nbytes
        out.append(chunk.view(dtype).view(shape) if n else torch.empty(shape, dtype=dtype, device=buf.device))
    return out
