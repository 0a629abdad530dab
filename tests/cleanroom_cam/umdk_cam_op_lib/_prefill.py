"""get_dispatch_layout / moe_dispatch_prefill / moe_combine_prefill on the CPU.

Facts come from src/cam/comm_operator/pybind/*.cpp and
src/cam/comm_operator/ascend_kernels/{dispatch_layout,notify_dispatch,
moe_dispatch_normal,moe_combine_normal}; see DECISIONS.md for every choice.
"""
import torch

from ._common import (
    MB,
    TilingError,
    aclnn_fail,
    alltoallv_bytes,
    bind_assert,
    check_device,
    device_fault,
    garbage,
    is_nz,
    max_window_size,
    pack,
    resolve_group,
    run_tiling,
    unpack,
)

LOCAL_RANK_SIZE = 8
MAX_BATCH_SIZE = 4096
EXPERT_DATA_SIZE = 1 + MAX_BATCH_SIZE
COMBINE_STATE_WIN_OFFSET = 4 * MB
NOTIFY_DISPATCH_WIN_OFFSET = 204 * MB
MAX_GROUP_NAME_LENGTH = 128


def _cdiv(a, b):
    return -(-a // b)


def _align(a, b):
    return _cdiv(a, b) * b


def _c_div(a, b):
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _group_name_ok(name):
    if isinstance(name, (bytes, bytearray)):
        n = len(bytes(name).split(b"\0")[0])
    else:
        n = len(name.encode("utf-8").split(b"\0")[0])
    return 0 < n < MAX_GROUP_NAME_LENGTH


# ===========================================================================
# get_dispatch_layout
# ===========================================================================
def _layout_tiling(num_tokens, num_ranks, num_experts, num_topk):
    # dispatch_layout_tiling.cpp GetAttrAndSetTilingData
    fail = "Get attr and set tiling data failed."
    if num_ranks <= 0 or num_ranks > 384:
        raise TilingError("rankSize is invalid, only support (0, 384], but got rankSize=%d." % num_ranks, fail)
    if num_experts <= 0 or num_experts > 512:
        raise TilingError("numExperts is invalid, only support (0, 512], but got numExperts=%d." % num_experts,
                          fail)
    if num_experts % num_ranks != 0:
        raise TilingError("numExperts (%d) not divisible by numRanks (%d)." % (num_experts, num_ranks), fail)
    if num_topk <= 0 or num_topk > 16:
        raise TilingError("numTopkPtr is invalid, only support (0, 16], but got numTopk=%d." % num_topk, fail)
    if num_tokens <= 0 or num_tokens > 8000:
        raise TilingError("tokenNum is invalid, only support (0, 8000], but got tokenNum=%d." % num_tokens, fail)


def get_dispatch_layout(topk_idx, num_experts, num_ranks):
    check_device("topk_idx", topk_idx)
    topk = topk_idx if topk_idx.dtype == torch.int64 else topk_idx.to(torch.int64)
    f = "get_dispatch_layout.cpp"
    bind_assert(topk.dim() == 2, f, 39, "topkIdxInt64.dim() == DIM_TWO")
    bind_assert(topk.is_contiguous(), f, 40, "topkIdxInt64.is_contiguous()")
    bind_assert(num_experts > 0, f, 41, "numExperts > 0")
    num_tokens = topk.size(0)
    num_topk = topk.size(1)
    server_num = _c_div(num_ranks, LOCAL_RANK_SIZE)
    dev = topk.device
    # output allocations (at::zeros) happen before the aclnn call
    num_tokens_per_expert = torch.zeros((num_experts,), dtype=torch.int32, device=dev)
    torch.zeros((num_ranks,), dtype=torch.int32, device="meta")
    torch.zeros((num_tokens, num_ranks), dtype=torch.int32, device="meta")
    notify_size = num_experts * EXPERT_DATA_SIZE + server_num + MAX_BATCH_SIZE * (1 + 2 * server_num + num_experts)
    send_token_idx_small = torch.zeros((num_tokens, num_topk), dtype=torch.int32, device=dev)
    torch.zeros((notify_size,), dtype=torch.int32, device="meta")

    run_tiling("aclnnDispatchLayout", _layout_tiling, num_tokens, num_ranks, num_experts, num_topk)

    # dispatch_layout.h: per-expert counts, and for every (token, k) in row-major
    # order the number of earlier occurrences of the same expert.
    flat = topk.reshape(-1).cpu()
    valid = (flat >= 0) & (flat < num_experts)
    counts = torch.bincount(flat[valid], minlength=num_experts)[:num_experts]
    n = flat.numel()
    if n:
        # invalid expert ids (outside [0, num_experts)) make the kernel read/write
        # its on-chip counter buffer out of range (silent corruption): their
        # slots get a garbage value and they are not counted.
        pos = torch.full((n,), 0x7FFFFFFF, dtype=torch.int64)
        if bool(valid.any()):
            vi = torch.nonzero(valid).view(-1)
            ve = flat[vi]
            order = torch.argsort(ve * n + vi, stable=True)
            starts = torch.zeros(num_experts + 1, dtype=torch.int64)
            starts[1:] = torch.cumsum(counts, 0)
            r = torch.arange(vi.numel()) - starts[ve[order]]
            tmp = torch.empty(vi.numel(), dtype=torch.int64)
            tmp[order] = r
            pos[vi] = tmp
        send_token_idx_small.copy_(pos.view(num_tokens, num_topk).to(torch.int32))
    num_tokens_per_expert.copy_(counts.to(torch.int32))
    return num_tokens_per_expert, send_token_idx_small


# ===========================================================================
# notify_dispatch (aclnnNotifyDispatch)
# ===========================================================================
def _notify_tiling(group_ep, send_count, num_tokens, rank_size, rank_id):
    fail = "Get attr and set tiling data failed."
    if not _group_name_ok(group_ep):
        raise TilingError("commGroupPtr is null.", fail)
    if rank_size <= 0 or rank_size > 384:
        raise TilingError("rankSize is invalid, only support (0, 384], but got rankSize=%d." % rank_size, fail)
    if rank_id < 0 or rank_id >= rank_size:
        raise TilingError("rankId is invalid, only support [0, %d), but got rankId=%d." % (rank_size, rank_id), fail)
    if send_count <= 0:
        raise TilingError("sendCount is invalid, only support > 0, but got sendCount=%d." % send_count, fail)
    if num_tokens <= 0:
        raise TilingError("numTokenPtr is invalid, only support > 0, but got numTokenPtr=%d." % num_tokens, fail)
    actual = 4 * send_count + 2 * MB
    if actual > max_window_size():
        raise TilingError("HCCL_BUFFSIZE is too SMALL, should larger than %dMB." % (actual // MB),
                          "params dataType is invalid.", "Tiling check param failed.")


# ===========================================================================
# moe_dispatch_normal (aclnnMoeDispatchNormal)
# ===========================================================================
def _dispatch_tiling(group_ep, ep_world, ep_rank, moe_expert_num, quant_mode, global_bs, x, expert_ids,
                     expert_ids_converted):
    fail_attr = "Get attr and set tiling data failed."
    if not _group_name_ok(group_ep):
        raise TilingError("groupEpPtr is null.", fail_attr)
    if ep_world < 2 or ep_world > 384:
        raise TilingError("epWorldSize is invalid, only support [2, 384], but got epWorldSize=%d." % ep_world,
                          fail_attr)
    if ep_rank < 0 or ep_rank >= ep_world:
        raise TilingError("epRankId is invalid, only support [0, %d), but got epRankId=%d." % (ep_world, ep_rank),
                          fail_attr)
    if moe_expert_num <= 0 or moe_expert_num > 512:
        raise TilingError("moeExpertNum is invalid, only support (0, 512], but got moeExpertNum=%d."
                          % moe_expert_num, fail_attr)
    if quant_mode < 0 or quant_mode > 2:
        raise TilingError("quantMode is invalid, only support [0, 2], but got quantMode=%d." % quant_mode, fail_attr)
    # TilingCheckMoeDispatchNormal: dims (guaranteed by the pybind asserts), dtypes, formats
    chk = "Tiling check param failed."
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TilingError("x dataType is invalid, dataType should be bf16 or float16, but is .",
                          "params dataType is invalid.", chk)
    if is_nz(x):
        raise TilingError("x format is invalid.", "params format is invalid.", chk)
    if not expert_ids_converted and is_nz(expert_ids):
        raise TilingError("expertId format is invalid.", "params format is invalid.", chk)
    # CheckAttrs
    ca = "Check attr failed."
    local = moe_expert_num // ep_world
    if moe_expert_num % ep_world != 0:
        raise TilingError("moeExpertNum should be divisible by epWorldSize, but moeExpertNum=%d, epWorldSize=%d."
                          % (moe_expert_num, ep_world), ca)
    if local <= 0:
        raise TilingError("localMoeExpertNum is invalid, localMoeExpertNum = %d" % local, ca)
    bs = x.size(0)
    if bs > 8000 or bs <= 0:
        raise TilingError("xDim0(BS) is invalid. Should be between [1, 8000], but got xDim0=%d." % bs, ca)
    if global_bs <= 0:
        raise TilingError("globalBS is invalid, should be positive, but got globalBS=%d." % global_bs, ca)
    # CheckTensorShape
    cs = "Check tensor shape failed."
    h = x.size(1)
    if h < 1024 or h > 7168:
        raise TilingError("xShape dims1(H) should be in [1024, 7168], but got %d." % h, cs)
    k = expert_ids.size(1)
    if expert_ids.size(0) != bs:
        raise TilingError("xShape's dim0 not equal to expertIdShape's dim0, xShape's dim0 is %d, "
                          "expertIdShape's dim0 is %d." % (bs, expert_ids.size(0)), cs)
    if k <= 0 or k > 16 or k > moe_expert_num:
        raise TilingError("expertIdShape's dim1(k) should be in (0, min(16, moeExpertNum=%d)], but got "
                          "expertIdShape's dim1=%d." % (moe_expert_num, k), cs)
    # window size
    win = max_window_size()
    max_bs = (global_bs & 0xFFFFFFFF) // ep_world
    tok_actual = _align(h * 2, 32) + 44
    tok_disp = _align(tok_actual, 512)
    tok_comb = _align(h * 2, 512)
    actual = (max_bs * k * (tok_comb + tok_disp) + COMBINE_STATE_WIN_OFFSET + NOTIFY_DISPATCH_WIN_OFFSET) * 2
    if actual > win:
        raise TilingError(
            "HCCL_BUFFSIZE is too SMALL, maxBs = %d, h = %d, epWorldSize = %d, localMoeExpertNum = %d, "
            "tokenNeedSizeDispatch = %d, tokenNeedSizeCombine = %d, k = %d, NEEDED_HCCL_BUFFSIZE((maxBs * k * "
            "(tokenNeedSizeDispatch + tokenNeedSizeCombine) + 3MB + 204MB) * 2) = %dMB, HCCL_BUFFSIZE=%dMB."
            % (max_bs, h, ep_world, local, tok_disp, tok_comb, k, actual // MB + 1, win // MB))
    return max_bs


def dynamic_quant_rows(xr):
    """moe_dispatch_normal.h QuantProcess: per-row int8 dynamic quantisation in fp32."""
    xf = xr.to(torch.float32)
    amax = xf.abs().amax(dim=1) if xf.size(1) else torch.zeros(xf.size(0), dtype=torch.float32,
                                                                 device=xf.device)
    scale = torch.tensor(127.0, dtype=torch.float32, device=xf.device) / (
        amax + torch.tensor(1e-12, dtype=torch.float32, device=xf.device))
    y = xf * scale.unsqueeze(1)
    q = torch.round(y).to(torch.int32)          # CAST_RINT (half to even)
    q = q.to(torch.float16).to(torch.int8)      # int32 -> half (ROUND) -> int8 (TRUNC)
    inv = torch.tensor(1.0, dtype=torch.float32, device=xf.device) / scale
    return q, inv


def moe_dispatch_prefill(x, topk_idx, topk_weights, num_tokens_per_expert, send_token_idx_small, group_ep, rank,
                         num_ranks, use_quant):
    for name, t in (("x", x), ("topk_idx", topk_idx), ("topk_weights", topk_weights),
                    ("num_tokens_per_expert", num_tokens_per_expert),
                    ("send_token_idx_small", send_token_idx_small)):
        check_device(name, t)
    f = "moe_dispatch_prefill.cpp"
    converted = topk_idx.dtype != torch.int32
    topk32 = topk_idx if not converted else topk_idx.to(torch.int32)
    quant_mode = 2 if use_quant else 0
    bind_assert(num_tokens_per_expert.dtype == torch.int32, f, 60,
                "numTokensPerExpert.scalar_type() == at::kInt")
    bind_assert(2 <= num_ranks <= 384, f, 63, "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX")
    bind_assert(x.dim() == 2 and x.is_contiguous(), f, 66, "x.dim() == DIM_TWO and x.is_contiguous()")
    bind_assert(num_tokens_per_expert.dim() == 1 and num_tokens_per_expert.is_contiguous(), f, 67,
                "numTokensPerExpert.dim() == 1 and numTokensPerExpert.is_contiguous()")
    bind_assert(num_tokens_per_expert.size(0) % num_ranks == 0, f, 68,
                "numTokensPerExpert.size(0) % numRanks == 0")
    num_tokens = x.size(0)
    hidden = x.size(1)
    num_experts = num_tokens_per_expert.size(0)
    L = num_experts // num_ranks
    num_topk = topk32.size(1)
    bind_assert(num_experts > 0, f, 77, "numExperts > 0")
    bind_assert(topk32.dim() == 2 and topk32.is_contiguous(), f, 78,
                "topkIdxInt32.dim() == DIM_TWO and topkIdxInt32.is_contiguous()")
    bind_assert(topk_weights.dim() == 2 and topk_weights.is_contiguous(), f, 79,
                "topkWeights.dim() == DIM_TWO and topkWeights.is_contiguous()")
    bind_assert(num_tokens == topk32.size(0), f, 80, "numTokens == topkIdxInt32.size(0)")
    bind_assert(num_tokens == send_token_idx_small.size(0), f, 81, "numTokens == sendTokenIdxSmall.size(0)")
    bind_assert(num_topk == topk_weights.size(1), f, 82, "numTopk == topkWeights.size(1)")
    bind_assert(num_topk == send_token_idx_small.size(1), f, 83, "numTopk == sendTokenIdxSmall.size(1)")
    dev = x.device
    send_count = 3 * L * num_ranks

    # ---------------- notify dispatch ----------------
    run_tiling("aclnnNotifyDispatch", _notify_tiling, group_ep, send_count, num_tokens, num_ranks, rank)
    group = resolve_group(group_ep)
    counts = num_tokens_per_expert.cpu().to(torch.int64)
    prefix = torch.zeros(num_experts, dtype=torch.int64)
    if num_experts > 1:
        prefix[1:] = torch.cumsum(counts, 0)[:-1]
    send_data = torch.stack([counts, prefix, torch.full_like(counts, num_tokens)], dim=1).to(torch.int32)
    outgoing = [pack([send_data[d * L:(d + 1) * L].contiguous()]) for d in range(num_ranks)]
    incoming = alltoallv_bytes(group, num_ranks, rank, [o.to(dev) for o in outgoing], dev)
    recv = torch.stack([unpack(b.cpu(), [((L, 3), torch.int32)])[0] for b in incoming]).to(torch.int64)
    # recv[s, l, :] = (count, prefix, numTokens) of src rank s for expert rank*L+l
    cnt_ls = recv[:, :, 0].transpose(0, 1).reshape(-1)   # index l*R + s
    off_ls = recv[:, :, 1].transpose(0, 1).reshape(-1)
    recv_count_cpu = torch.cumsum(cnt_ls, 0)
    total_recv = int(torch.sum(cnt_ls.to(torch.float32)).item())
    max_bs = int(recv[:, :, 2].max().item()) if recv.numel() else 0
    recv_tokens_per_expert_cpu = cnt_ls.view(L, num_ranks).sum(dim=1)
    recv_count = recv_count_cpu.to(torch.int32).to(dev)
    recv_tokens_per_expert = recv_tokens_per_expert_cpu.to(torch.int64).to(dev)

    # ---------------- dispatch ----------------
    g_bs = max_bs * num_ranks
    n_recv = 1 if total_recv == 0 else total_recv
    out_dtype = torch.int8 if use_quant else x.dtype
    expand_x = garbage((n_recv, hidden), out_dtype, dev)
    scales_out = garbage((n_recv,), torch.float32, dev)
    expand_idx = garbage((n_recv * 3,), torch.int32, dev)
    if send_token_idx_small.dtype != torch.int32:
        # op def (K/moe_dispatch_normal/op_host/moe_dispatch_normal.cpp) accepts DT_INT32 only
        aclnn_fail("aclnnMoeDispatchNormal", ["send_tokenIdx dataType %s is not supported by MoeDispatchNormal."
                                              % send_token_idx_small.dtype])
    run_tiling("aclnnMoeDispatchNormal", _dispatch_tiling, group_ep, num_ranks, rank, num_experts, quant_mode,
               g_bs, x, topk32, converted)

    # sender side: scatter (token, k) rows into the local window
    n_flat = num_tokens * num_topk
    e_flat = topk32.reshape(-1).cpu().to(torch.int64)
    sti = send_token_idx_small.detach().reshape(-1).cpu().to(torch.int64)
    if n_flat and bool(((e_flat < 0) | (e_flat >= num_experts)).any()):
        device_fault("moe_dispatch_prefill: expert id outside [0, %d) addresses the window out of range"
                     % num_experts)
    pos = prefix[e_flat] + sti if n_flat else torch.zeros(0, dtype=torch.int64)
    win_rows = max(int(counts.sum().item()) if num_experts else 0, 1)
    cap = max(win_rows, max_bs * num_topk)
    if n_flat and bool(((pos < 0) | (pos >= cap)).any()):
        device_fault("moe_dispatch_prefill: send_token_idx_small places a token outside the window")
    win_x = garbage((cap, hidden), out_dtype, torch.device("cpu"))
    win_scale = garbage((cap,), torch.float32, torch.device("cpu"))
    win_idx = garbage((cap, 3), torch.int32, torch.device("cpu"))
    if n_flat:
        tok = torch.arange(n_flat) // num_topk
        kk = torch.arange(n_flat) % num_topk
        xc = x.detach().cpu()
        if use_quant:
            q, inv = dynamic_quant_rows(xc)
            rows_x, rows_s = q[tok], inv[tok]
        else:
            rows_x, rows_s = xc[tok], None
        # last writer wins on duplicated positions (ascending order)
        win_x[pos] = rows_x
        if rows_s is not None:
            win_scale[pos] = rows_s
        win_idx[pos] = torch.stack([torch.full_like(tok, rank), tok, kk], 1).to(torch.int32)
    outgoing = []
    for d in range(num_ranks):
        parts = []
        for l in range(L):
            e = d * L + l
            a, c = int(prefix[e]), int(counts[e])
            a2 = min(max(a, 0), cap)
            b2 = min(max(a + c, a2), cap)
            seg_x, seg_s, seg_i = win_x[a2:b2], win_scale[a2:b2], win_idx[a2:b2]
            if b2 - a2 < max(c, 0):
                extra = max(c, 0) - (b2 - a2)
                seg_x = torch.cat([seg_x, garbage((extra, hidden), out_dtype, torch.device("cpu"))])
                seg_s = torch.cat([seg_s, garbage((extra,), torch.float32, torch.device("cpu"))])
                seg_i = torch.cat([seg_i, garbage((extra, 3), torch.int32, torch.device("cpu"))])
            parts += [seg_x.contiguous(), seg_s.contiguous(), seg_i.contiguous()]
        outgoing.append(pack(parts).to(dev) if parts else torch.empty(0, dtype=torch.uint8, device=dev))
    incoming = alltoallv_bytes(group, num_ranks, rank, outgoing, dev)
    # receiver side: row order is local expert major, source rank minor
    chunks = {}
    for s in range(num_ranks):
        specs = []
        for l in range(L):
            c = int(recv[s, l, 0])
            specs += [((c, hidden), out_dtype), ((c,), torch.float32), ((c, 3), torch.int32)]
        vals = unpack(incoming[s].cpu(), specs)
        for l in range(L):
            chunks[(l, s)] = vals[3 * l:3 * l + 3]
    ex_x = expand_x.cpu() if dev.type != "cpu" else expand_x
    ex_s = scales_out.cpu() if dev.type != "cpu" else scales_out
    ex_i = expand_idx.cpu().view(-1, 3) if dev.type != "cpu" else expand_idx.view(-1, 3)
    pre = 0
    for i in range(num_experts):
        l, s = i // num_ranks, i % num_ranks
        c = int(cnt_ls[i])
        cx, cs, ci = chunks[(l, s)]
        if c > 0:
            ex_x[pre:pre + c] = cx
            if use_quant:
                ex_s[pre:pre + c] = cs
            ex_i[pre:pre + c] = ci
        pre += c
    if dev.type != "cpu":
        expand_x.copy_(ex_x)
        scales_out.copy_(ex_s)
        expand_idx.copy_(ex_i.reshape(-1))
    return expand_x, scales_out, expand_idx, recv_count, recv_tokens_per_expert


# ===========================================================================
# moe_combine_normal (aclnnMoeCombineNormal)
# ===========================================================================
def _combine_tiling(x, src_idx, topk_w, group_ep, ep_world, ep_rank, moe_expert_num, global_bs):
    if x.dtype == torch.int32:
        raise TilingError("recvX dataType is invalid, dataType should be bf16 or float16, but is ")
    fa = "Getting attr failed."
    if not _group_name_ok(group_ep):
        raise TilingError("groupEp is invalid.", fa)
    if ep_world < 2 or ep_world > 384:
        raise TilingError("epWorldSize is invalid, only support [2, 384], but got epWorldSize=%d." % ep_world, fa)
    if ep_rank < 0 or ep_rank >= ep_world:
        raise TilingError("epRankId is invalid, only support [0, %d), but got epRankId=%d." % (ep_world, ep_rank),
                          fa)
    if moe_expert_num <= 0 or moe_expert_num > 512:
        raise TilingError("moeExpertNum is invalid, only support (0, 512], but got moeExpertNum=%d."
                          % moe_expert_num, fa)
    tc = "Tiling check params failed"
    if src_idx.dim() != 1:
        raise TilingError("tokenSrcInfoForCombine must be 1-dimension, but got %d dim" % src_idx.dim(),
                          "param shape of input tensor is invalid", "param shape is invalid", tc)
    if topk_w.dim() != 2:
        raise TilingError("topkWeights must be 2-dimension, but got %d dim" % topk_w.dim(),
                          "param shape of input tensor is invalid", "param shape is invalid", tc)
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TilingError("recvX dataType is invalid, dataType should be bf16 or float16, but is ",
                          "param dataType is invalid", tc)
    if src_idx.dtype != torch.int32:
        raise TilingError("tokenSrcInfoForCombine dataType is invalid, dataType should be int32, but is",
                          "param dataType is invalid", tc)
    if is_nz(x):
        raise TilingError("recvXFormat is invalid", "param Format is invalid", tc)
    if is_nz(src_idx):
        raise TilingError("tokenSrcInfoFormat is invalid", "param Format is invalid", tc)
    ac = "attr check failed."
    if moe_expert_num % ep_world != 0:
        raise TilingError("moeExpertNum should be divisible by epWorldSize, but got moeExpertNum=%d, "
                          "epWorldSize=%d." % (moe_expert_num, ep_world), ac)
    local = moe_expert_num // ep_world
    if local <= 0:
        raise TilingError("localMoeExpertNum is invalid, localMoeExpertNum = %d" % local, ac)
    bs = topk_w.size(0)
    if bs <= 0 or bs > 8000:
        raise TilingError("Invalid topkWeights dims0(BS) %d. Should be between [1, 8000]." % bs, ac)
    if global_bs != 0 and (global_bs < ep_world * bs or global_bs % ep_world != 0):
        raise TilingError("globalBS is invalid, only support 0 or maxBs(maxBs is the largest bs on all ranks) * "
                          "epWorldSize, but got globalBS=%d, bs=%d, epWorldSize=%d." % (global_bs, bs, ep_world), ac)
    if global_bs == 0:
        global_bs = bs * ep_world
    dc = "param dim check failed."
    k = topk_w.size(1)
    if k <= 0 or k > 16 or k > moe_expert_num:
        raise TilingError("topkWeights's dim1(K) should be in (0, min(16, moeExpertNum %d)], but got "
                          "topkWeights's dim1=%d." % (moe_expert_num, k), dc)
    h = x.size(1)
    if h < 1024 or h > 7168:
        raise TilingError("recvX's dim1(H) should be in [1024, 7168], but got %d." % h, dc)
    if src_idx.size(0) < x.size(0) * 3:
        raise TilingError("Invalid srcInfo dims0 %d. Should not be smaller than %d." % (src_idx.size(0),
                                                                                       x.size(0) * 3), dc)
    win = max_window_size()
    max_bs = global_bs // ep_world
    tok_comb = _align(h * 2, 512)
    actual = (max_bs * k * tok_comb + COMBINE_STATE_WIN_OFFSET + NOTIFY_DISPATCH_WIN_OFFSET) * 2
    if actual > win:
        raise TilingError(
            "HCCL_BUFFSIZE is too SMALL, maxBs = %d, h = %d, epWorldSize = %d, localMoeExpertNum = %d, "
            "tokenNeedSizeCombine = %d, k = %d, NEEDED_HCCL_BUFFSIZE(((maxBs * k * tokenNeedSizeCombine)) + 3MB + "
            "204MB) * 2) = %dMB, HCCL_BUFFSIZE=%dMB." % (max_bs, h, ep_world, local, tok_comb, k,
                                                         actual // MB + 1, win // MB))
    return k


def moe_combine_prefill(x, topk_idx, topk_weights, src_idx, send_head, group_ep, rank, num_ranks):
    for name, t in (("x", x), ("topk_idx", topk_idx), ("topk_weights", topk_weights), ("src_idx", src_idx),
                    ("send_head", send_head)):
        check_device(name, t)
    f = "moe_combine_prefill.cpp"
    bind_assert(x.dim() == 2 and x.is_contiguous(), f, 35, "x.dim() == DIM_TWO and x.is_contiguous()")
    topk32 = topk_idx if topk_idx.dtype == torch.int32 else topk_idx.to(torch.int32)
    w = topk_weights if topk_weights.dtype == torch.float32 else topk_weights.to(torch.float32)
    dev = x.device
    hidden = x.size(1)
    moe_expert_num = send_head.size(0)
    global_bs = topk32.size(0) * num_ranks
    combined = garbage((w.size(0), hidden), x.dtype, dev)
    if send_head.dtype != torch.int32:
        # op def (K/moe_combine_normal/op_host/moe_combine_normal.cpp) accepts DT_INT32 only
        aclnn_fail("aclnnMoeCombineNormal", ["ep_recv_counts dataType %s is not supported by MoeCombineNormal."
                                             % send_head.dtype])
    k = run_tiling("aclnnMoeCombineNormal", _combine_tiling, x, src_idx, w, group_ep, num_ranks, rank,
                   moe_expert_num, global_bs)
    bs = w.size(0)
    group = resolve_group(group_ep)
    # CopyBufferToShareAndSetStatus: rows [0, send_head[E-1]) go back to their source slot
    self_send = int(send_head.reshape(-1)[moe_expert_num - 1].item())
    n_rows = x.size(0)
    if self_send < 0:
        self_send = 0  # uint32 split over cores; treat a negative count as nothing sent
    info = src_idx.detach().reshape(-1).cpu().to(torch.int64)
    if self_send * 3 > info.numel():
        info = torch.cat([info, torch.full((self_send * 3 - info.numel(),), 0x7FFFFFFF, dtype=torch.int64)])
    trip = info[:self_send * 3].view(-1, 3)
    xc = x.detach().cpu()
    if self_send > n_rows:
        xc = torch.cat([xc, garbage((self_send - n_rows, hidden), x.dtype, torch.device("cpu"))])
    if self_send and bool(((trip[:, 0] < 0) | (trip[:, 0] >= num_ranks)).any()):
        device_fault("moe_combine_prefill: src_idx names a rank outside the group")
    outgoing = []
    for d in range(num_ranks):
        sel = torch.nonzero(trip[:, 0] == d).view(-1) if self_send else torch.zeros(0, dtype=torch.int64)
        slots = (trip[sel, 1] * k + trip[sel, 2]).to(torch.int64)
        rows = xc[sel].contiguous()
        outgoing.append(pack([torch.tensor([sel.numel()], dtype=torch.int64), slots.contiguous(), rows]).to(dev))
    incoming = alltoallv_bytes(group, num_ranks, rank, outgoing, dev)
    slot_rows = garbage((bs * k, hidden), x.dtype, torch.device("cpu"))
    filled = torch.zeros(bs * k, dtype=torch.bool)
    for s in range(num_ranks):
        buf = incoming[s].cpu()
        n = int(buf[:8].clone().view(torch.int64)[0])
        slots, rows = unpack(buf[8:], [((n,), torch.int64), ((n, hidden), x.dtype)])
        ok = (slots >= 0) & (slots < bs * k)   # others land in unread window memory
        slot_rows[slots[ok]] = rows[ok]
        filled[slots[ok]] = True
    if bs and not bool(filled.all()):
        missing = int((~filled).view(bs, k).any(dim=1).nonzero()[0].item())
        raise RuntimeError("moe_combine_prefill: rank %d waits forever for the combine data of token %d "
                           "(not every top-k slot was sent back); the real kernel hangs here" % (rank, missing))
    # ReadBufferAndWeightedSum: fp32 accumulate in k order, CAST_RINT to x dtype
    wf = w.detach().cpu().reshape(bs, k)
    acc = torch.zeros((bs, hidden), dtype=torch.float32)
    rows = slot_rows.view(bs, k, hidden)
    for kk in range(k):
        acc = acc + rows[:, kk].to(torch.float32) * wf[:, kk:kk + 1]
    combined.copy_(acc.to(x.dtype).to(dev))
    return combined
