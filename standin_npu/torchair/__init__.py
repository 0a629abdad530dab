"""CPU stand-in for ``torchair`` (Ascend's torch.compile backend), enough for UMDK's CAM UTs.

``get_npu_backend(compiler_config=...)`` returns a torch.compile backend that runs the captured FX graph
as it is (Dynamo's ``eager`` backend): no graph engine (GE) compilation, so "GE mode" exercises Dynamo
capture and then the same CPU kernels as eager mode. The config is accepted and kept on the backend.
The API follows Ascend's TorchAir guide (``get_npu_backend(*, compiler_config=None,
custom_decompositions={})`` returns the backend ``torch.compile`` takes; ``get_compiler(compiler_config)``
the FX-graph compiler) and its use in umdk test/cam/ut (``torch.compile(Module().npu(),
backend=torchair.get_npu_backend(compiler_config=CompilerConfig()))``). Whether the op is captured in one
graph without breaks is Dynamo's doing (the op library's Meta kernel), not this backend's: the backend
receives the FX graph the real torchair would. Lab-only test scaffolding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .configs.compiler_config import CompilerConfig

__all__ = ["CompilerConfig", "get_compiler", "get_npu_backend"]


def get_compiler(compiler_config: CompilerConfig | None = None) -> Callable[..., Any]:
    """The compiler of an FX graph: the graph module itself (it runs eagerly)."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return gm.forward

    return compile_graph


def get_npu_backend(*, compiler_config: CompilerConfig | None = None, custom_decompositions: Any = None
                    ) -> Callable[..., Any]:
    """A backend for ``torch.compile(model, backend=...)``."""
    config = compiler_config if compiler_config is not None else CompilerConfig()
    compile_graph = get_compiler(config)

    def npu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return compile_graph(gm, example_inputs)

    npu_backend.compiler_config = config  # type: ignore[attr-defined]
    return npu_backend
