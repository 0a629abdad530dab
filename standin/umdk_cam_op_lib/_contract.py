"""The CAM ops' contract as data (umdk 00cc16f1), read alike by the op stand-in and the rank suite.

One file, shipped twice byte for byte (``suites/cam/rank/camcontract.py``,
``standin/umdk_cam_op_lib/_contract.py``; a test keeps them equal). Stdlib only. What a
:class:`Limit` holds and where each check lives upstream: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UMDK_COMMIT = "00cc16f1378ae7af48740da663adb87aecaaefe9"
PYBIND = "src/cam/comm_operator/pybind/"
KERNELS = "src/cam/comm_operator/ascend_kernels/"
GUIDE = "doc/en/cam/CAM API Guide.md"
_LAYOUT_T = KERNELS + "dispatch_layout/op_host/dispatch_layout_tiling.cpp"
_DISPATCH_T = KERNELS + "moe_dispatch_normal/op_host/moe_dispatch_normal_tiling.cpp"
_NOTIFY_T = KERNELS + "notify_dispatch/op_host/notify_dispatch_tiling.cpp"
_COMBINE_T = KERNELS + "moe_combine_normal/op_host/moe_combine_normal_tiling.cpp"
_FUSED_T = KERNELS + "fused_deep_moe/op_host/fused_deep_moe_tiling.cpp"
_FUSED_DEF = KERNELS + "fused_deep_moe/op_host/fused_deep_moe.cpp"
_DISPATCH_DEF = KERNELS + "moe_dispatch_normal/op_host/moe_dispatch_normal.cpp"
_MC2 = KERNELS + "utils/op_host/mc2_tiling_utils.h"
_ARGS = KERNELS + "utils/op_host/tiling_args.h"

#: how each kind of check surfaces at the call (regex of the start of the RuntimeError's text)
ERROR_FORMS = {
    "pybind": r"Failed: Assertion error \S+:\d+ error message or error code is '",
    "tiling": r"call aclnn\w+ failed",
    "opdef": r"call aclnn\w+ failed",
}


@dataclass(frozen=True)
class Limit:
    """One quantity of one op. ``lo``/``hi``: the valid range (inclusive; None = unbounded); ``refused_lo``/
    ``refused_hi``: the check refuses below/above these (None: the valid bound); ``step``: valid values are
    multiples of it; ``names``: the text a refusal names the quantity by (upstream's own words)."""

    key: str
    check: str
    names: str
    source: str
    guide: str = ""
    lo: int | None = None
    hi: int | None = None
    step: int = 1
    refused_lo: int | None = None
    refused_hi: int | None = None

    def valid(self, value: int) -> bool:
        return ((self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)
                and value % self.step == 0)

    def refused(self, value: int) -> bool:
        """True when the op's check refuses ``value`` (False inside the valid range and in a gap where the
        check accepts what the guide does not document: there the result is undefined, not refused)."""
        lo = self.lo if self.refused_lo is None else self.refused_lo
        hi = self.hi if self.refused_hi is None else self.refused_hi
        return (lo is not None and value < lo) or (hi is not None and value > hi)

    def pattern(self) -> str:
        """Regex a refusal of this quantity matches: the check's error form, then the quantity's name."""
        return ERROR_FORMS[self.check] + r"[\s\S]*" + re.escape(self.names)


_L = Limit
LIMITS: dict[str, Limit] = {lim.key: lim for lim in (
    # get_dispatch_layout: pybind get_dispatch_layout.cpp, tiling dispatch_layout_tiling.cpp
    _L("layout.topk_idx_dim", "pybind", "topkIdxInt64.dim() == DIM_TWO", PYBIND + "get_dispatch_layout.cpp:39"),
    _L("layout.num_experts_positive", "pybind", "numExperts > 0", PYBIND + "get_dispatch_layout.cpp:41",
       GUIDE + ":28", lo=1),
    _L("layout.ranks", "tiling", "rankSize is invalid", _LAYOUT_T + ":99", GUIDE + ":29", lo=1, hi=384),
    _L("layout.experts", "tiling", "numExperts is invalid", _LAYOUT_T + ":103", GUIDE + ":28", lo=1, hi=512),
    _L("layout.experts_per_rank", "tiling", "not divisible by numRanks", _LAYOUT_T + ":107", GUIDE + ":44"),
    _L("layout.top_k", "tiling", "numTopk", _LAYOUT_T + ":112", GUIDE + ":42", lo=1, hi=16),
    _L("layout.tokens", "tiling", "tokenNum is invalid", _LAYOUT_T + ":121", GUIDE + ":43", lo=1, hi=8000),
    _L("layout.expert_ids", "none", "", PYBIND + "get_dispatch_layout.cpp:39", GUIDE + ":27", lo=0),
    # moe_dispatch_prefill: pybind moe_dispatch_prefill.cpp, tiling moe_dispatch_normal_tiling.cpp
    _L("dispatch.counts_dtype", "pybind", "numTokensPerExpert.scalar_type() == at::kInt",
       PYBIND + "moe_dispatch_prefill.cpp:60", GUIDE + ":71"),
    _L("dispatch.ranks", "pybind", "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX",
       PYBIND + "moe_dispatch_prefill.cpp:63", GUIDE + ":94", lo=2, hi=384),
    _L("dispatch.x_dim", "pybind", "x.dim() == DIM_TWO and x.is_contiguous()",
       PYBIND + "moe_dispatch_prefill.cpp:66", GUIDE + ":68"),
    _L("dispatch.counts_per_rank", "pybind", "numTokensPerExpert.size(0) % numRanks == 0",
       PYBIND + "moe_dispatch_prefill.cpp:68", GUIDE + ":98"),
    _L("dispatch.x_dtype", "tiling", "x dataType is invalid", _DISPATCH_T + ":185", GUIDE + ":68"),
    _L("dispatch.experts", "tiling", "moeExpertNum is invalid", _DISPATCH_T + ":340", GUIDE + ":95", lo=1, hi=512),
    # an empty batch never reaches xDim0's check: pybind moe_dispatch_prefill.cpp:103 runs aclnnNotifyDispatch
    # first, whose tiling refuses numTokens <= 0 (the clean-room library found it; tests/cleanroom_cam)
    _L("dispatch.tokens_notify", "tiling", "numTokenPtr is invalid", _NOTIFY_T + ":133", GUIDE + ":93", lo=1),
    _L("dispatch.tokens", "tiling", "xDim0(BS) is invalid", _DISPATCH_T + ":393", GUIDE + ":93", lo=1, hi=8000),
    _L("dispatch.hidden", "tiling", "xShape dims1(H)", _DISPATCH_T + ":426", lo=1024, hi=7168),
    _L("dispatch.top_k", "tiling", "expertIdShape's dim1(k)", _DISPATCH_T + ":444", GUIDE + ":92", lo=1, hi=16),
    _L("dispatch.window", "tiling", "HCCL_BUFFSIZE is too SMALL", _DISPATCH_T + ":590", GUIDE + ":97"),
    _L("dispatch.expert_ids", "none", "", PYBIND + "moe_dispatch_prefill.cpp:53", GUIDE + ":69", lo=0),
    # moe_combine_prefill: pybind moe_combine_prefill.cpp, tiling moe_combine_normal_tiling.cpp
    _L("combine.x_dim", "pybind", "x.dim() == DIM_TWO and x.is_contiguous()",
       PYBIND + "moe_combine_prefill.cpp:35", GUIDE + ":120"),
    _L("combine.ranks", "tiling", "epWorldSize is invalid", _COMBINE_T + ":140", GUIDE + ":141", lo=2, hi=384),
    _L("combine.top_k", "tiling", "topkWeights's dim1(K)", _COMBINE_T + ":365", GUIDE + ":139", lo=1, hi=16),
    _L("combine.hidden", "tiling", "recvX's dim1(H)", _COMBINE_T + ":378", lo=1024, hi=7168),
    _L("combine.x_dtype", "tiling", "recvX dataType is invalid", _COMBINE_T + ":279", GUIDE + ":120"),
    _L("combine.tokens", "tiling", "topkWeights dims0(BS)", _COMBINE_T + ":444", GUIDE + ":140", lo=1, hi=8000),
    _L("combine.window", "tiling", "HCCL_BUFFSIZE is too SMALL", _COMBINE_T + ":564", GUIDE + ":144"),
    # fused_deep_moe: pybind fused_deep_moe.cpp, op definition fused_deep_moe.cpp, tiling fused_deep_moe_tiling.cpp
    _L("fused.x_dim", "pybind", "x.dim() == DIM_TWO", PYBIND + "fused_deep_moe.cpp:53", GUIDE + ":181"),
    _L("fused.expert_ids_dim", "pybind", "expertIds.dim() == DIM_TWO", PYBIND + "fused_deep_moe.cpp:54",
       GUIDE + ":182"),
    _L("fused.x_dtype", "opdef", "input x", _FUSED_DEF + ":16", GUIDE + ":181"),
    _L("fused.expert_ids_dtype", "opdef", "input expert_ids", _FUSED_DEF + ":28", GUIDE + ":182"),
    _L("fused.weight_scale_dtype", "opdef", "input gmm", _FUSED_DEF + ":52", GUIDE + ":184"),
    _L("fused.expert_scales_dtype", "opdef", "input expert_scales", _FUSED_DEF + ":88", GUIDE + ":187"),
    _L("fused.smooth_scales_dtype", "opdef", "smooth_scales", _FUSED_DEF + ":148", GUIDE + ":192"),
    _L("fused.x_active_mask_dtype", "opdef", "input x_active_mask", _FUSED_DEF + ":172", GUIDE + ":194"),
    _L("fused.batch", "tiling", "batchSize(bs)", _FUSED_T + ":527", GUIDE + ":215", lo=0, hi=256),
    _L("fused.hidden", "tiling", "tokenLength(h)", _FUSED_T + ":531", GUIDE + ":217", lo=1024, hi=7168, step=256,
       refused_lo=512),
    _L("fused.gmm1", "tiling", "gmm1 hidden size", _FUSED_T + ":536", GUIDE + ":218", lo=1024, hi=6144,
       step=1024),
    _L("fused.share_gmm1", "tiling", "shareGmm1 hidden size", _FUSED_T + ":186", GUIDE + ":219", lo=1024,
       hi=6144, step=1024),
    _L("fused.top_k", "tiling", "topK(k) must <= 12", _FUSED_T + ":544", GUIDE + ":214", lo=1, hi=12),
    _L("fused.top_k_experts", "tiling", "topK(k) must <= moeExpertNum", _FUSED_T + ":546", GUIDE + ":214"),
    _L("fused.rank_id", "tiling", "epRankId must", _FUSED_T + ":584", GUIDE + ":197", lo=0),
    _L("fused.experts", "tiling", "moeExpertNum must <= 512", _FUSED_T + ":585", GUIDE + ":216", lo=1, hi=512),
    _L("fused.experts_per_rank", "tiling", "moeExpertNum must be divisible by epRankSize", _FUSED_T + ":591",
       GUIDE + ":198"),
    _L("fused.global_bs", "tiling", "globalBatchSize must be divisible by epRankSize", _FUSED_T + ":557",
       GUIDE + ":221", lo=0),
    _L("fused.window", "tiling", "HCCL_BUFFSIZE is too SMALL", _FUSED_T + ":625", GUIDE + ":220"),
    _L("fused.expert_ids", "none", "", _FUSED_T + ":546", GUIDE + ":182", lo=-1),
)}

#: the op definitions' DataType lists (torch dtype names), one binary per combination
FUSED_X_DTYPES = ("bfloat16", "float16")                  # fused_deep_moe.cpp:16 (output :184 alike)
FUSED_IDS_DTYPE = "int32"                                 # fused_deep_moe.cpp:28
FUSED_SCALES_DTYPE = "float32"                            # expert_scales :88, smooth scales :148, :160
FUSED_MASK_DTYPE = "bool"                                 # x_active_mask :172
#: (x, gmm1_weight_scale, gmm2_weight_scale) columns of fused_deep_moe.cpp:16,52,76 (shared scales :112,:136)
FUSED_SCALE_COMBOS = (
    ("bfloat16", "float32", "float32"), ("bfloat16", "float32", "bfloat16"),
    ("bfloat16", "bfloat16", "float32"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float16", "float32", "float32"), ("float16", "float32", "float16"),
    ("float16", "float16", "float32"), ("float16", "float16", "float16"),
)
PREFILL_X_DTYPES = ("bfloat16", "float16")                # moe_dispatch_normal.cpp:17, tiling :185

#: worlds and experts no CAM op takes: ranks (layout/dispatch/combine tilings, pybind) and experts (all tilings)
MAX_RANKS = 384
MAX_EXPERTS = 512
#: HCCL window: HCCL_BUFFSIZE in MB, 200 when unset (mc2_tiling_utils.h:25 GetMaxWindowSize)
DEFAULT_HCCL_BUFFSIZE_MB = 200
MB = 1024 * 1024
#: prefill window constants (tiling_args.h:15-16; moe_dispatch_normal_tiling.cpp:84-93)
_COMBINE_STATE, _NOTIFY = 4 * MB, 204 * MB
_WIN_ALIGN, _UB_ALIGN, _SCALE_IDX, _OUT_BYTES, _DOUBLE = 512, 32, 44, 2, 2


def _up(value: int, align: int) -> int:
    return -(-value // align) * align


def hccl_buffsize_mb(env: dict[str, str]) -> int:
    """The window the ops see (MB): ``HCCL_BUFFSIZE`` or the default (mc2_tiling_utils.h:23-40)."""
    text = env.get("HCCL_BUFFSIZE")
    return DEFAULT_HCCL_BUFFSIZE_MB if text is None else int(text)


def dispatch_window(max_tokens: int, top_k: int, hidden: int) -> int:
    """Bytes moe_dispatch_normal_tiling.cpp:575-590 needs: maxBs = the most tokens of any rank."""
    row_d = _up(_up(hidden * _OUT_BYTES, _UB_ALIGN) + _SCALE_IDX, _WIN_ALIGN)
    row_c = _up(hidden * _OUT_BYTES, _WIN_ALIGN)
    return (max_tokens * top_k * (row_c + row_d) + _COMBINE_STATE + _NOTIFY) * _DOUBLE


def combine_window(tokens: int, top_k: int, hidden: int) -> int:
    """Bytes moe_combine_normal_tiling.cpp:553-564 needs: maxBs = this rank's own tokens (the pybind passes
    globalBs = topk_idx.size(0) * numRanks, moe_combine_prefill.cpp:52)."""
    return (tokens * top_k * _up(hidden * _OUT_BYTES, _WIN_ALIGN) + _COMBINE_STATE + _NOTIFY) * _DOUBLE


def fused_window(local_experts: int, global_bs: int, hidden: int) -> int:
    """Bytes fused_deep_moe_tiling.cpp:618-625 needs; checked before CheckData turns global_bs 0 into
    bs * ranks (:753-764), so global_bs = 0 needs nothing."""
    return local_experts * global_bs * hidden * 2 * 2


def fits(demand: int, buffsize_mb: int) -> bool:
    return demand <= buffsize_mb * MB


def needed_mb(demand: int) -> int:
    """The smallest HCCL_BUFFSIZE (MB) that holds ``demand`` bytes."""
    return -(-demand // MB)
