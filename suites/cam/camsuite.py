"""Shared parameters of the controller-side suite modules."""

import pytest

#: world sizes every case runs at, each skipped with a reason when the env cannot host it
WORLDS = [pytest.param(w, marks=pytest.mark.ranks(w), id=f"{w}ranks") for w in (4, 8, 16)]
#: launch env of the launches that run the prefill ops (dispatch/combine prefill): the CAM API guide requires a
#: 4096 MB HCCL buffer for them (npu-fidelity.md §3); every other launch keeps CANN's default
PREFILL_ENV = {"HCCL_BUFFSIZE": "4096"}
