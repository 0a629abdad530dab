"""Expert ids outside [0, E) fault the device: each case runs alone, in a launch of its own.

No op checks the ids' values (umdk src/cam/comm_operator/pybind/get_dispatch_layout.cpp has only the
dim/contiguity/num_experts checks; the dispatch_layout tiling cannot see values): the kernel uses the id as an
offset, its write lands out of bounds, and the runtime reports it asynchronously at the process's next
synchronize, as one of the kernel-fault codes of torch_npu's NPUErrorCodes.h (507015 aicore, 507035 vector core,
507044/507045 trap out of bounds). The process's stream stays unusable, so the case is the last one its process
runs (``poisons_device``: the harness then meets the other ranks through the store only). Every rank passes
the bad id, so no rank waits for a poisoned peer. On the CPU (gloo) path there is no device to fault: the copy
is lost silently (undefined outputs) and the case is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from camref import prefill_inputs
from cases import prefill_case

pytestmark = [pytest.mark.multi_process_test, pytest.mark.poisons_device]

#: the error a kernel fault raises at the next synchronize (torch_npu NPUFunctions.cpp npuSynchronizeDevice:
#: ``NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is <code>``; codes from NPUErrorCodes.h)
DEVICE_FAULT = r"NPU function error: \w+, error code is (507015|507035|507044|507045)"

#: the bad id each case puts into row 0 of every rank's topk_idx: E (one past the end) or -1
BAD_IDS = {"id_num_experts": lambda experts: experts, "id_minus_one": lambda experts: -1}


@pytest.mark.parametrize("kind", list(BAD_IDS))
def test_out_of_range_expert_id_faults_the_device(cam, seed, kind):
    if cam.backend != "hccl":
        pytest.skip("no device on the gloo path: an out-of-range id is lost silently, nothing to observe")
    case = prefill_case(cam.world)
    _, topk, _ = prefill_inputs(seed, cam.rank, case)
    topk = np.ascontiguousarray(topk)
    topk[0, 0] = BAD_IDS[kind](case.experts)
    # no error at the call: the op makes no value check (a refusal here fails the match below)
    with pytest.raises(RuntimeError, match=DEVICE_FAULT):
        cam.ops.get_dispatch_layout(cam.to_device(torch.from_numpy(topk)), case.experts, cam.world)
        cam.sync()
