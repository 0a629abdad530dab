"""The sweep's matrix: which configurations a perf run measures
(``--perf-matrix quick|nightly|FILE``).

The ops' contract it keeps to, from umdk's tiling files: docs/internals/perf.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from framework.perf.row import Config

__all__ = ["MATRICES", "Matrix", "configs", "estimate_s", "load"]

Op = Literal["dispatch", "combine", "fused_deep_moe"]


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ops: list[Op] = Field(default=["dispatch", "combine", "fused_deep_moe"], min_length=1)
    tokens: list[int] = Field(min_length=1)
    hidden: list[int] = Field(min_length=1)
    top_k: list[int] = Field(min_length=1)
    experts_per_rank: list[int] = Field(default=[2], min_length=1)
    fused_inter: int = Field(default=512, gt=0, description="fused_deep_moe's I (gmm1 is 2I wide)")
    dtype: Literal["bfloat16"] = "bfloat16"
    quant: Literal["none"] = "none"
    warmup: int = Field(default=2, ge=0)
    iterations: int = Field(default=10, ge=2)


#: the named matrices: quick for the lab and a smoke test, nightly for a cluster's night
MATRICES = {
    "quick": Matrix(tokens=[16, 64], hidden=[1024], top_k=[2], experts_per_rank=[2], warmup=1, iterations=5),
    "nightly": Matrix(tokens=[128, 512, 2048, 4096], hidden=[4096, 7168], top_k=[4, 8],
                      experts_per_rank=[2, 8], warmup=3, iterations=20),
}

#: the prefill tiling's limits (see the module docstring)
_HIDDEN = (1024, 7168)
_TOKENS = (1, 8000)
_MAX_EXPERTS = 512
#: fused_deep_moe's tiling: batch, hidden (and its step), gmm1 width (and its step), top_k
_FUSED_BATCH = (1, 256)
_FUSED_HIDDEN_STEP = 256
_FUSED_GMM1 = (1024, 6144, 1024)
_FUSED_TOP_K = 12


def load(choice: str) -> Matrix:
    """``quick``, ``nightly`` or a YAML/JSON file; a bad file raises ``ValueError`` naming it and the key."""
    if choice in MATRICES:
        return MATRICES[choice]
    path = Path(choice)
    if not path.is_file():
        raise ValueError(f"--perf-matrix {choice!r}: neither {' nor '.join(MATRICES)} nor a file")
    try:
        return Matrix.model_validate(_read(path))
    except ValidationError as exc:
        raise ValueError(_first_error(path, exc)) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not YAML/JSON: {exc}") from None


def _read(path: Path) -> Any:
    """The document of a YAML (``.yaml``, ``.yml``) or else JSON file."""
    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)


def _first_error(path: Path, exc: ValidationError) -> str:
    """``<file>: <key path>: <problem>`` of the first problem pydantic found."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top)"
    return f"{path}: {where}: {first['msg']}"


def _inside_fused(c: Config, inter: int) -> bool:
    lo, hi, step = _FUSED_GMM1
    return (_FUSED_BATCH[0] <= c.tokens <= _FUSED_BATCH[1] and c.hidden % _FUSED_HIDDEN_STEP == 0
            and lo <= 2 * inter <= hi and (2 * inter) % step == 0 and c.top_k <= _FUSED_TOP_K)


def _inside(c: Config, inter: int) -> bool:
    prefill = (_HIDDEN[0] <= c.hidden <= _HIDDEN[1] and _TOKENS[0] <= c.tokens <= _TOKENS[1]
               and c.top_k <= c.experts <= _MAX_EXPERTS)
    return prefill and (c.op != "fused_deep_moe" or _inside_fused(c, inter))


def configs(m: Matrix, world: int) -> list[Config]:
    """The matrix's configurations at ``world`` ranks that the ops' contract allows."""
    out = [Config(op=op, tokens=t, hidden=h, top_k=k, experts=e * world, world=world, dtype=m.dtype, quant=m.quant)
           for op in m.ops for t in m.tokens for h in m.hidden for k in m.top_k for e in m.experts_per_rank]
    return [c for c in out if _inside(c, m.fused_inter)]


def estimate_s(m: Matrix, worlds: list[int], per_launch_s: float = 20.0, per_iteration_s: float = 0.05) -> float:
    """A rough duration: a launch per world plus every iteration (op and reference) of every configuration."""
    iterations = sum(len(configs(m, w)) for w in worlds) * (m.warmup + m.iterations) * 2
    return len(worlds) * per_launch_s + iterations * per_iteration_s
