"""The stand-in with injected data faults, each behind a knob: the table of faults and the copy that carries
them (used by the unit check of the table and the lab test that runs the suite against the copy)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: the knob's reader, added to the copy as umdk_cam_op_lib/_inject.py (the stand-in itself has no knob)
INJECT = '''\
"""Test-only fault knob: CAMIT_INJECT="fault=case;..." turns a fault on while that case runs."""
import os


def on(fault: str) -> bool:
    spec = dict(p.split("=", 1) for p in os.environ.get("CAMIT_INJECT", "").split(";") if "=" in p)
    case = spec.get(fault)
    return case is not None and case in os.environ.get("PYTEST_CURRENT_TEST", "")
'''


@dataclass(frozen=True)
class Fault:
    """A mistake of one op: where it goes (the line it follows in ``module``), the code, the rank-side case
    it is active in and the text of the check that must catch it."""
    module: str
    after: str
    code: str
    case: str
    caught: str


FAULTS = {
    # a received copy is never written (dropped token): its row keeps the buffer's garbage
    "dropped_token": Fault("prefill.py", "        recv_x[pos] = got[1]\n",
                           "recv_x[pos[-1]] = garbage((x.size(1),), recv_x.dtype, 'inject')",
                           "test_dispatch_combine[noquant-even]", "moe_dispatch_prefill: recv_x rows on rank"),
    # one copy written twice (duplicated token) over another
    "duplicated_token": Fault("prefill.py", "        recv_x[pos] = got[1]\n", "recv_x[pos[-1]] = recv_x[pos[0]]",
                              "test_dispatch_combine[quant-even]", "moe_dispatch_prefill: recv_x (int8)"),
    # off by one in the per-expert counts
    "count_off_by_one": Fault("prefill.py", "    recv_tokens_per_expert = cnt.sum(dim=1).to(torch.int64)\n",
                              "recv_tokens_per_expert[0] += 1", "test_dispatch_combine[noquant-uneven_zero_rows]",
                              "moe_dispatch_prefill: recv_tokens_per_expert on rank"),
    # wrong dequantisation scale
    "wrong_scale": Fault("prefill.py", "            scales[pos] = got[2].view(-1)\n", "scales[pos] *= 2",
                         "test_dispatch_combine[quant-uneven_zero_rows]", "dynamic_scales_out on rank"),
    # wrong expert routing: each copy lands in its neighbour's row (another expert's or token's place)
    "wrong_routing": Fault("prefill.py", "        recv_x[pos] = got[1]\n", "recv_x[pos] = got[1].roll(1, 0)",
                           "test_more_tokens_than_vector_cores", "moe_combine_prefill: combined_x"),
    # combine ignores top-k slot 0's weight
    "combine_weights": Fault("prefill.py", "    weights = topk_weights.to(torch.float32).unsqueeze(-1)\n",
                             "weights = torch.cat([weights[:, :1] * 0, weights[:, 1:]], dim=1)",
                             "test_two_cam_communicators_in_one_process",
                             "moe_combine_prefill: combined_x"),
    # fused: the last top-k slot's expert output left out of the output
    "fused_output": Fault("fused.py", "    weights = expert_scales.to(torch.float32).unsqueeze(-1)\n",
                          "weights = torch.cat([weights[:, :-1], weights[:, -1:] * 0], dim=1)",
                          "test_fused_deep_moe[base]", "fused_deep_moe: output"),
    # fused: off by one in the tokens counted for local expert 0
    "fused_counts": Fault("fused.py",
                          "    expert_token_nums = torch.bincount(r_local, minlength=local).to(torch.int64)\n",
                          "expert_token_nums[0] += 1", "test_fused_deep_moe[with_smooth]",
                          "fused_deep_moe: expert_token_nums"),
    # fused: the shared expert's last row left at zero
    "fused_share": Fault("fused.py", "        share_output = ffn(sq, ssx, sw1, ss1, sw2, ss2, x.dtype)\n",
                         "share_output[-1] = 0", "test_fused_deep_moe[with_share]", "fused_deep_moe: share_output"),
}


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def faulty_standin(dest: Path) -> Path:
    """A copy of the stand-in with every fault of FAULTS behind its knob; a fault whose line is gone fails here
    (update the table), so no fault is silently left out."""
    shutil.copytree(REPO / "standin", dest, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    pkg = dest / "umdk_cam_op_lib"
    (pkg / "_inject.py").write_text(INJECT)
    for module in sorted({f.module for f in FAULTS.values()}):
        text = (pkg / module).read_text().replace("\nimport torch\n", "\nimport torch\n\nfrom . import _inject\n", 1)
        for name, fault in FAULTS.items():
            if fault.module != module:
                continue
            assert text.count(fault.after) == 1, f"{module} changed: update fault {name!r}"
            pad = _indent(fault.after)
            text = text.replace(fault.after, f"{fault.after}{pad}if _inject.on({name!r}):\n{pad}    {fault.code}\n")
        (pkg / module).write_text(text)
    return dest
