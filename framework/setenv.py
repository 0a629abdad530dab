"""The shell steps that give a host's processes the CANN and CAM environment, for deploy verify,
launch and coverage.

Design: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from framework import commands
from framework.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig, HostSpec

#: the aclnn APIs of each op: ``EXEC_NPU_CMD(aclnnXxx, ...)`` in umdk ``src/cam/comm_operator/pybind/<op>.cpp``;
#: ``EXEC_NPU_CMD`` resolves ``<api>GetWorkspaceSize`` and ``<api>`` in ``libcust_opapi.so``
OP_ACLNN: Mapping[str, tuple[str, ...]] = {
    "get_dispatch_layout": ("aclnnDispatchLayout",),
    "moe_dispatch_prefill": ("aclnnNotifyDispatch", "aclnnMoeDispatchNormal"),
    "moe_combine_prefill": ("aclnnMoeCombineNormal",),
    "fused_deep_moe": ("aclnnFusedDeepMoe",),
}
OPAPI_LIBRARY = "libcust_opapi.so"


def aclnn_symbols(ops: Sequence[str] = tuple(OP_ACLNN)) -> list[str]:
    """Every symbol ``libcust_opapi.so`` must export for ``ops``: ``<api>GetWorkspaceSize`` and ``<api>``."""
    return [sym for op in ops for api in OP_ACLNN[op] for sym in (api + "GetWorkspaceSize", api)]


def vendor_dir_of(vendor_set_env: str) -> str:
    """``<install>/vendors/<vendor>`` from its ``bin/set_env.bash``."""
    return posixpath.dirname(posixpath.dirname(vendor_set_env))


def env_steps(cann_set_env: str | None, extra_set_env: Sequence[str] = (),
              vendor_set_env: str | None = None) -> list[str]:
    """bash steps (join with `` && ``): source CANN, the extra scripts, the vendor, then ensure op_api/lib."""
    q = commands.quote
    steps = [f". {q(p)}" for p in ([cann_set_env] if cann_set_env else []) + list(extra_set_env)]
    if vendor_set_env:
        steps.append(f". {q(vendor_set_env)}")
        lib = vendor_dir_of(vendor_set_env) + "/op_api/lib"
        steps.append(f'case ":${{LD_LIBRARY_PATH:-}}:" in *:{q(lib)}:*|*:{q(lib + "/")}:*) ;; '
                     f'*) export LD_LIBRARY_PATH={q(lib)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" ;; esac')
    return steps


def require_cann(env: EnvConfig, spec: HostSpec) -> None:
    """An NPU host needs ``cann.set_env``: ConfigError naming the key and the host otherwise.

    camit does not guess the toolkit layout (``ascend-toolkit/`` up to CANN 8.3, ``cann/`` from 8.5): preflight's
    cann column shows the layout it found, the env file says which ``set_env.sh`` to source.
    """
    if spec.npu.soc != "cpu" and env.cann is None:
        raise ConfigError(env.source, "cann.set_env",
                          f"host {spec.name} has npu.soc {spec.npu.soc} but the env file sets no cann.set_env "
                          "(CANN's set_env.sh on the hosts, e.g. /usr/local/Ascend/cann/set_env.sh; "
                          "`camit check` shows the layout found)")


def extra_of(env: EnvConfig) -> tuple[str, ...]:
    return tuple(env.cann.extra_set_env) if env.cann else ()
