"""CPU stand-in for ``torchair`` (Ascend's torch.compile backend), enough for UMDK's CAM UTs and
samples. Lab-only test scaffolding.

What is refused in which mode, from the CAM API guide: docs/internals/standin-npu.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .configs.compiler_config import CompilerConfig

__all__ = ["CompilerConfig", "get_compiler", "get_npu_backend"]

CAM_NAMESPACE = "umdk_cam_op_lib"
ACLGRAPH = "reduce-overhead"
GUIDE = ("umdk doc/en/cam/CAM API Guide.md: fused_deep_moe \"Support aclgraph only when graph in on\"; the "
         "layout and prefill ops \"Do not support dynamic graph when in GE mode; Do not support fullgraph=true\"")


def cam_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The CAM ops the graph calls (``umdk_cam_op_lib.<op>``), in graph order."""
    return [str(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith(CAM_NAMESPACE + ".")]


def _fullgraph() -> bool:
    """Whether Dynamo compiles this frame with ``fullgraph=True`` (its translator's ``one_graph``)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        return bool(InstructionTranslator.current_tx().one_graph)
    except AttributeError:  # no frame being translated (a graph handed over directly)
        return False


def check_cam_graph(gm: torch.fx.GraphModule, config: CompilerConfig, fullgraph: bool) -> None:
    """RuntimeError when the graph holds CAM ops in a way the CAM API guide does not support."""
    ops = cam_ops(gm)
    if not ops:
        return
    mode = str(config.mode)
    if mode != ACLGRAPH:
        raise RuntimeError(
            f"torchair: the graph calls {', '.join(sorted(set(ops)))} in mode '{mode}' (GE): the CAM ops do not "
            f"support GE mode and ship no GE converter ({GUIDE}); compile with config.mode = '{ACLGRAPH}' "
            "(aclgraph), as umdk src/cam/examples/fused_deep_moe_sample.py does")
    if fullgraph:
        raise RuntimeError(
            f"torchair: the graph calls {', '.join(sorted(set(ops)))} under fullgraph=True, which the CAM ops do "
            f"not support ({GUIDE}); compile without fullgraph=True")


def get_compiler(compiler_config: CompilerConfig | None = None) -> Callable[..., Any]:
    """The compiler of an FX graph: the graph module itself (it runs eagerly), after the CAM check."""
    config = compiler_config if compiler_config is not None else CompilerConfig()

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        check_cam_graph(gm, config, _fullgraph())
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
