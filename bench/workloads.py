"""The benchmark workloads: each an FDSL chain under bench/fdsl plus the same computation written
the way a user of each anchor would write it (NumPy op by op, PyTorch, JAX, CuPy).

Sizes: `full` is the benchmark size (issue 6); `tiny` keeps every workload's shape structure at
a size the tests run in milliseconds. Inputs are float32 from a fixed seed; batchnorm variances
are positive. Bytes are the compulsory traffic (every input read once, every output written
once); flops count multiply-adds as two.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

FDSL_DIR = Path(__file__).resolve().parent / "fdsl"
GELU_C = 0.7978845608028654   # sqrt(2 / pi)


@dataclass(frozen=True)
class Arg:
    """One input: its shape from the binding, values offset + scale * N(0, 1) (or U(lo, hi))."""
    shape: Callable[[dict], tuple[int, ...]]
    scale: float = 1.0
    offset: float = 0.0
    uniform: tuple[float, float] | None = None

    def make(self, binding: dict, rng: np.random.Generator) -> np.ndarray:
        shape = self.shape(binding)
        if self.uniform is not None:
            return rng.uniform(*self.uniform, shape).astype(np.float32)
        x = rng.standard_normal(shape, dtype=np.float32)
        return (x * np.float32(self.scale) + np.float32(self.offset)).astype(np.float32)


@dataclass(frozen=True)
class Workload:
    name: str
    chain: str
    full: dict[str, int]
    tiny: dict[str, int]
    bound: str                                   # "memory" or "compute": what limits it
    args: tuple[Arg, ...]
    output_shape: Callable[[dict], tuple[int, ...]]
    flops: Callable[[dict], int]

    @property
    def fdsl(self) -> Path:
        return FDSL_DIR / f"{self.name}.fdsl"

    def binding(self, size: str) -> dict[str, int]:
        return dict(self.full if size == "full" else self.tiny)

    def make_inputs(self, binding: dict, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [np.ascontiguousarray(a.make(binding, rng)) for a in self.args]

    def bytes(self, binding: dict) -> int:
        """Compulsory traffic: every input read once, the output written once (float32)."""
        elems = sum(int(np.prod(a.shape(binding))) for a in self.args)
        return 4 * (elems + int(np.prod(self.output_shape(binding))))


def _mn(b):
    return (b["M"], b["N"])


def _vec(key):
    return lambda b: (b[key],)


WORKLOADS: tuple[Workload, ...] = (
    Workload("ew_chain", "ew_chain", dict(M=4096, N=4096), dict(M=8, N=32), "memory",
             (Arg(_mn),), _mn, lambda b: 16 * b["M"] * b["N"]),
    Workload("bias_gelu_res", "bias_gelu_res", dict(M=8192, N=3072), dict(M=8, N=48), "memory",
             (Arg(_mn), Arg(_vec("N")), Arg(_mn)), _mn, lambda b: 12 * b["M"] * b["N"]),
    Workload("softmax", "softmax", dict(M=8192, N=1024), dict(M=8, N=64), "memory",
             (Arg(_mn, scale=2.0),), _mn, lambda b: 5 * b["M"] * b["N"]),
    Workload("layernorm", "layernorm", dict(M=8192, N=1024), dict(M=8, N=64), "memory",
             (Arg(_mn), Arg(_vec("N"), 0.1, 1.0), Arg(_vec("N"), 0.1)), _mn,
             lambda b: 8 * b["M"] * b["N"]),
    Workload("mlp", "mlp", dict(M=512, K=1024, N=4096), dict(M=8, K=16, N=32), "compute",
             (Arg(lambda b: (b["M"], b["K"])), Arg(lambda b: (b["K"], b["N"]), 1 / 32),
              Arg(_vec("N"), 0.1)), _mn,
             lambda b: 2 * b["M"] * b["K"] * b["N"] + 12 * b["M"] * b["N"]),
    Workload("conv_bn_relu", "conv_bn_relu", dict(B=8, C=64, F=64), dict(B=1, C=2, F=3), "compute",
             (Arg(lambda b: (b["B"], b["C"], 56, 56)), Arg(lambda b: (b["F"], b["C"], 3, 3), 1 / 24),
              Arg(_vec("F"), 0.1), Arg(_vec("F"), uniform=(0.5, 1.5)), Arg(_vec("F"), 0.1, 1.0),
              Arg(_vec("F"), 0.1)),
             lambda b: (b["B"], b["F"], 56, 56),
             lambda b: 2 * b["B"] * b["F"] * b["C"] * 9 * 56 * 56 + 3 * b["B"] * b["F"] * 56 * 56),
    Workload("attention", "attention", dict(B=8, S=1024, D=64), dict(B=2, S=16, D=64), "compute",
             tuple(Arg(lambda b: (b["B"], b["S"], b["D"])) for _ in range(3)),
             lambda b: (b["B"], b["S"], b["D"]),
             lambda b: 4 * b["B"] * b["S"] * b["S"] * b["D"] + 5 * b["B"] * b["S"] * b["S"]),
)

BY_NAME = {w.name: w for w in WORKLOADS}


# ---- NumPy, op by op: what a NumPy user writes (float32 throughout) ----------------------------

def array_fns(xp) -> dict[str, Callable]:
    """The op-by-op functions over an array module `xp` (NumPy here, CuPy on a GPU)."""
    f = np.float32

    def gelu(h):
        return f(0.5) * h * (f(1) + xp.tanh(f(GELU_C) * (h + f(0.044715) * h * h * h)))

    def softmax(x):
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layernorm(x, g, b):
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        var = (d * d).mean(axis=-1, keepdims=True)
        return d / xp.sqrt(var + f(1e-5)) * g + b

    def conv_bn_relu(x, w, m, v, g, b):
        xpad = xp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = xp.lib.stride_tricks.sliding_window_view(xpad, (3, 3), axis=(2, 3))   # B,C,H,W,3,3
        y = xp.einsum("bchwij,fcij->bfhw", win, w, optimize=True)
        scale = g / xp.sqrt(v + f(1e-5))
        return xp.maximum((y - m[:, None, None]) * scale[:, None, None] + b[:, None, None], f(0))

    return {
        "ew_chain": lambda x: xp.maximum(xp.tanh(x * f(1.702) + f(0.5)) * (f(1) / (f(1) + xp.exp(-x)))
                                         - xp.exp(-xp.abs(x)), f(0)) + f(0.25) * x,
        "bias_gelu_res": lambda x, b, r: gelu(x + b) + r,
        "softmax": softmax,
        "layernorm": layernorm,
        "mlp": lambda x, w, b: gelu(x @ w + b),
        "conv_bn_relu": conv_bn_relu,
        "attention": lambda q, k, v: softmax(q @ k.transpose(0, 2, 1) / f(8)) @ v,
    }


NUMPY = array_fns(np)


# ---- PyTorch: the functional API a PyTorch user calls -----------------------------------------

def torch_fns(torch) -> dict[str, Callable]:
    F = torch.nn.functional
    return {
        "ew_chain": lambda x: torch.relu(torch.tanh(x * 1.702 + 0.5) * torch.sigmoid(x)
                                         - torch.exp(-x.abs())) + 0.25 * x,
        "bias_gelu_res": lambda x, b, r: F.gelu(x + b, approximate="tanh") + r,
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layernorm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5),
        "mlp": lambda x, w, b: F.gelu(torch.addmm(b, x, w), approximate="tanh"),
        "conv_bn_relu": lambda x, w, m, v, g, b: torch.relu(
            F.batch_norm(F.conv2d(x, w, padding=1), m, v, g, b, training=False, eps=1e-5)),
        "attention": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    }


def torch_out_fns(torch) -> dict[str, Callable]:
    """The PyTorch functions whose last op writes into a preallocated `out` (the memory-
    equalised timing): those whose last op takes out= (an add, softmax, aten's gelu, a clamp
    for relu); the other workloads' last ops (layer_norm, scaled_dot_product_attention) do not."""
    F = torch.nn.functional
    return {
        "ew_chain": lambda x, out: torch.add(torch.relu(torch.tanh(x * 1.702 + 0.5) * torch.sigmoid(x)
                                                        - torch.exp(-x.abs())), 0.25 * x, out=out),
        "bias_gelu_res": lambda x, b, r, out: torch.add(F.gelu(x + b, approximate="tanh"), r, out=out),
        "softmax": lambda x, out: torch.softmax(x, -1, out=out),
        "mlp": lambda x, w, b, out: torch._C._nn.gelu(torch.addmm(b, x, w), approximate="tanh", out=out),
        "conv_bn_relu": lambda x, w, m, v, g, b, out: torch.clamp_min(
            F.batch_norm(F.conv2d(x, w, padding=1), m, v, g, b, training=False, eps=1e-5), 0, out=out),
    }


# ---- JAX: jax.numpy / jax.nn, jitted ----------------------------------------------------------

def jax_fns(jax, jnp) -> dict[str, Callable]:
    nn = jax.nn

    def layernorm(x, g, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def conv_bn_relu(x, w, m, v, g, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        scale = g * jax.lax.rsqrt(v + 1e-5)
        return nn.relu((y - m[:, None, None]) * scale[:, None, None] + b[:, None, None])

    return {
        "ew_chain": lambda x: nn.relu(jnp.tanh(x * 1.702 + 0.5) * nn.sigmoid(x) - jnp.exp(-jnp.abs(x))) + 0.25 * x,
        "bias_gelu_res": lambda x, b, r: nn.gelu(x + b, approximate=True) + r,
        "softmax": lambda x: nn.softmax(x, axis=-1),
        "layernorm": layernorm,
        "mlp": lambda x, w, b: nn.gelu(x @ w + b, approximate=True),
        "conv_bn_relu": conv_bn_relu,
        "attention": lambda q, k, v: nn.softmax(q @ jnp.swapaxes(k, -1, -2) / 8.0, axis=-1) @ v,
    }


# the symbol each workload's `fusec dynamic` build takes at run time (bench/suite.py, --dynamic):
# its rows, tokens, images or batch
DYNAMIC_SYMBOL = {"ew_chain": "M", "bias_gelu_res": "M", "softmax": "M", "layernorm": "M", "mlp": "M",
                  "conv_bn_relu": "B", "attention": "B"}
