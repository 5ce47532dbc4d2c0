"""The `torch.compile` backend: an ATen graph (aot_autograd with the core decompositions) is
partitioned into the largest regions fusec can take (CapabilityBasedPartitioner asking
torch_graph.node_support); each region becomes one FDSL chain (torch_graph.translate) compiled
by fusec, and what fusec cannot take runs eagerly in between. A region whose translation or
build fails runs eagerly too, and the report says why (nothing is lost, nothing is silently
wrong). `Report` gathers what was compiled: the graph's compute ops, how many run in fusec, the
ops left to eager with their reasons, the kernels and the FDSL of each region.
"""
from __future__ import annotations

import operator
import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from fusec.dsl.diagnostics import FdslError
from fusec.errors import UsageError

from .torch_graph import ATEN_VIEWS, TORCH_DTYPES, Unsupported, node_support, op_name, translate

_BACKEND_KEYS = ("target", "cache", "cache_dir", "max_memory", "remote_cache")


def compute_ops(gm: torch.fx.GraphModule) -> Counter:
    """The graph's compute ops (calls other than views, copies and size arithmetic), by name."""
    c = Counter()
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            name = op_name(n.target)
            if name not in ATEN_VIEWS and isinstance(n.target, torch._ops.OpOverload):
                c[name] += 1
    return c


@dataclass
class Region:
    """One partition: its FDSL (or why it runs eagerly), its chain once compiled."""
    name: str
    ops: Counter
    fdsl: str | None = None
    eager_reason: str | None = None
    kernels: int | None = None
    compile_seconds: float = 0.0
    builds: int = 0
    cache: list = field(default_factory=list)
    per_size: str | None = None       # why its dynamic symbols are built per size (None: one build per class)


@dataclass
class Report:
    """What `fusec.torch.explain` (or a backend given `options={"report": r}`) saw: per graph,
    its ATen compute ops; per region, its ops, FDSL, kernels and compile time, or why it ran
    eagerly; the ops left between regions and why."""
    graphs: int = 0
    aten_ops: int = 0
    regions: list = field(default_factory=list)
    outside: dict = field(default_factory=dict)       # op name -> {"count": n, "reasons": [..]}
    training: int = 0                                 # training graphs, run eagerly

    @property
    def in_fusec(self) -> int:
        return sum(sum(r.ops.values()) for r in self.regions if r.eager_reason is None)

    @property
    def coverage(self) -> float:
        return self.in_fusec / self.aten_ops if self.aten_ops else 1.0

    @property
    def eager(self) -> dict:
        """op name -> {"count": n, "reasons": [...]}: every compute op that ran eagerly."""
        out = {k: {"count": v["count"], "reasons": list(v["reasons"])} for k, v in self.outside.items()}
        for r in self.regions:
            if r.eager_reason is not None:
                for name, n in r.ops.items():
                    e = out.setdefault(name, {"count": 0, "reasons": []})
                    e["count"] += n
                    if r.eager_reason not in e["reasons"]:
                        e["reasons"].append(r.eager_reason)
        return out

    @property
    def kernels(self) -> int:
        return sum(r.kernels or 0 for r in self.regions if r.eager_reason is None)

    @property
    def fdsl(self) -> list[str]:
        return [r.fdsl for r in self.regions if r.fdsl is not None and r.eager_reason is None]

    @property
    def partitions(self) -> int:
        return sum(1 for r in self.regions if r.eager_reason is None)

    @property
    def compile_seconds(self) -> float:
        return sum(r.compile_seconds for r in self.regions)

    def eager_op(self, name: str, reason: str, count: int = 1) -> None:
        e = self.outside.setdefault(name, {"count": 0, "reasons": []})
        e["count"] += count
        if reason not in e["reasons"]:
            e["reasons"].append(reason)

    def __str__(self) -> str:
        lines = [f"fusec: {self.graphs} graph{'s' * (self.graphs != 1)}, {self.aten_ops} ATen compute ops, "
                 f"{self.in_fusec} in fusec ({self.coverage:.1%}), {self.partitions} fusec "
                 f"region{'s' * (self.partitions != 1)}, {self.kernels} kernels"]
        if self.training:
            lines.append(f"  {self.training} training graph(s) ran eagerly (fusec compiles inference graphs: "
                         "use torch.no_grad() or torch.inference_mode())")
        for r in self.regions:
            ops = sum(r.ops.values())
            if r.eager_reason is None:
                lines.append(f"  {r.name}: {ops} ops -> {r.kernels if r.kernels is not None else '?'} kernels"
                             + (f", {r.builds} build{'s' * (r.builds != 1)} in {r.compile_seconds:.2f} s"
                                if r.builds else ""))
                if r.per_size:
                    lines.append(f"    built per size: {r.per_size}")
            else:
                lines.append(f"  {r.name}: {ops} ops run eagerly: {r.eager_reason}")
        if self.eager:
            lines.append("  eager ops:")
            for name, e in sorted(self.eager.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
                lines.append(f"    aten.{name} x{e['count']}: {'; '.join(e['reasons'])}")
        return "\n".join(lines)

    __repr__ = __str__


class _Support(OperatorSupportBase):
    def __init__(self):
        self.why: dict = {}

    def is_node_supported(self, submodules, node) -> bool:
        if node.target is operator.getitem:
            return node_support(node.args[0]) is None if isinstance(node.args[0], torch.fx.Node) else False
        why = node_support(node)
        if why is not None:
            self.why[node] = why
        return why is None


def _as_array(t: torch.Tensor):
    if t.device.type == "cuda":
        if t.dtype == torch.bfloat16:     # no bf16 in the interface: its bits, as a Numba bf16 array
            import ml_dtypes
            from numba import cuda
            return cuda.as_cuda_array(t.contiguous().view(torch.int16)).view(ml_dtypes.bfloat16)
        return t.contiguous()             # __cuda_array_interface__
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _as_tensor(a, device) -> torch.Tensor:
    if hasattr(a, "__cuda_array_interface__"):
        if getattr(a, "dtype", None) is not None and a.dtype.name == "bfloat16":     # a bf16 result (Numba)
            return torch.as_tensor(a.view(np.int16), device=device).view(torch.bfloat16)
        return torch.as_tensor(a, device=device)
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a) if a.flags.writeable else torch.from_numpy(a.copy())


class FusecRegion(torch.nn.Module):
    """One partition run by a fusec chain; its original submodule runs instead if the build
    fails (the region's eager_reason says why)."""

    def __init__(self, translated, program, eager: torch.fx.GraphModule, region: Region, tuple_out: bool,
                 dump: Path | None, static_program=None, verify: bool = True, fresh_outputs: bool = False):
        super().__init__()
        self.verify = verify
        # each build this region makes hands back its outputs in new arrays every call
        # (Executable.fresh_outputs) instead of the planned pool's reused buffers
        self.fresh_outputs = fresh_outputs
        self.translated = translated
        self.chain = program[translated.chain]
        self.static_program = static_program     # makes the program without dynamic symbols
        self.eager = eager
        self.region = region
        self.tuple_out = tuple_out
        self.dump = dump
        self._seen: set = set()

    def forward(self, *args):
        if self.region.eager_reason is not None:
            return self.eager(*args)
        arrays = []
        device = None
        for src in self.translated.inputs:
            if isinstance(src, tuple):
                arrays.append(_as_array(src[1]))
            else:
                t = args[src]
                device = device or t.device
                arrays.append(_as_array(t))
        binding = self.chain.binding_for(arrays)
        key = tuple(sorted(self.chain.build_binding(binding).items()))
        first = key not in self._seen
        if first:
            t0 = time.perf_counter()
            try:
                try:
                    built = self.chain.compiled(binding)
                except (UsageError, FdslError) as e:
                    if self.static_program is None or "at run time" not in str(e):
                        raise
                    # an op of the region cannot take a symbol's extent at run time: the region
                    # is built per size instead (dynamo still does not recompile)
                    self.region.per_size = _first_error(e)
                    self.chain = self.static_program()[self.translated.chain]
                    self.static_program = None
                    binding = self.chain.binding_for(arrays)
                    key = tuple(sorted(self.chain.build_binding(binding).items()))
                    built = self.chain.compiled(binding)
            except (UsageError, FdslError) as e:
                # fusec refused this region (a size it cannot plan, ...): it runs eagerly
                self.region.eager_reason = f"fusec could not build it: {_first_error(e)}"
                return self.eager(*args)
            if self.fresh_outputs:
                built.fused.fresh_outputs = True
            self.region.compile_seconds += time.perf_counter() - t0
            self.region.builds += 1
            self.region.kernels = built.kernel_counts.get("fused", self.region.kernels)
            self.region.cache.append(built.cache)
            if self.dump is not None and built.plan is not None:
                import json
                (self.dump / f"{self.translated.chain}.plan.json").write_text(json.dumps(built.plan, indent=1,
                                                                                         default=str))
            self._seen.add(key)
        t0 = time.perf_counter() if first else 0.0
        outs = self.chain(*arrays)
        if first:                       # Numba compiles the kernels on their first call: count it
            self.region.compile_seconds += time.perf_counter() - t0
        outs = outs if isinstance(outs, tuple) else (outs,)
        res = tuple(_as_tensor(o, device) for o in outs)
        if first and self.verify:
            want = self.eager(*args)
            wrong = _differs(res, want if self.tuple_out else (want,))
            if wrong is not None:
                # never silently wrong: the region runs eagerly from now on, and says why
                self.region.eager_reason = (f"fusec's outputs differed from eager PyTorch on its first call "
                                            f"({wrong}); it runs eagerly")
                warnings.warn(f"fusec: {self.translated.chain}: {self.region.eager_reason} (FUSEC_TORCH_DUMP=DIR "
                              "writes its FDSL and plan: a reproduction for a bug report)", stacklevel=2)
                return want
        return res if self.tuple_out else res[0]


def _differs(got, want) -> str | None:
    """Why fusec's outputs `got` are not eager PyTorch's `want` (runtime/compare.py's tolerance
    for the dtype), or None when they agree."""
    from fusec.runtime.compare import compare
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, torch.Tensor):
            continue
        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
            return f"output {k}: {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        dtype = TORCH_DTYPES.get(w.dtype)
        if dtype is None:
            continue
        c = compare(_host(g), _host(w), dtype)          # (compare works in float64)
        if not c.ok:
            return f"output {k}: {c.describe()}"
    return None


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


class Backend:
    """The compile step: called by aot_autograd with each inference graph."""

    def __init__(self, options: dict | None, report: Report | None):
        options = dict(options or {})
        self.report = options.pop("report", None) or report or Report()
        self.target = options.pop("target", None)
        self.compile_kwargs = {k: options.pop(k) for k in _BACKEND_KEYS[1:] if k in options}
        verify = options.pop("verify", True)
        if not isinstance(verify, bool):
            raise UsageError(f"the fusec backend's option verify takes True or False, not {verify!r}")
        self.verify = verify                # each region's first call per size checked against eager
        fresh = options.pop("fresh_outputs", False)
        if not isinstance(fresh, bool):
            raise UsageError(f"the fusec backend's option fresh_outputs takes True or False, not {fresh!r}")
        self.fresh_outputs = fresh          # every call's outputs in new arrays, not the planned pool's
        self.options = options              # fusec CompileOptions fields
        dump = os.environ.get("FUSEC_TORCH_DUMP")
        self.dump = Path(dump) if dump else None
        if self.dump is not None:
            self.dump.mkdir(parents=True, exist_ok=True)

    def inference(self, gm: torch.fx.GraphModule, example_inputs):
        # aot_autograd calls this under its FakeTensorMode: constants are folded with real tensors
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():
            return self._inference(gm, example_inputs)

    def _inference(self, gm: torch.fx.GraphModule, example_inputs):
        from functorch.compile import make_boxed_func
        self.report.graphs += 1
        ops = compute_ops(gm)
        self.report.aten_ops += sum(ops.values())
        support = _Support()
        part = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
        partitions = part.propose_partitions()
        fused = part.fuse_partitions(partitions) if partitions else gm
        in_regions = set()
        for node in list(fused.graph.nodes):
            if node.op != "call_module" or not node.target.startswith("fused_"):
                continue
            sub = getattr(fused, node.target)
            region = self._region(sub, example_inputs)
            in_regions.add(node.target)
            if region is None:
                continue
            setattr(fused, node.target, region)
        # the ops left outside every region
        for node in fused.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                name = op_name(node.target)
                if name in ATEN_VIEWS:
                    continue
                why = support.why.get(node) or node_support(node) or "left between regions"
                self.report.eager_op(name, why)
        fused.recompile()
        return make_boxed_func(fused.forward)

    def _region(self, sub: torch.fx.GraphModule, example_inputs):
        name = f"region{len(self.report.regions)}"
        ops = compute_ops(sub)
        region = Region(name, ops)
        self.report.regions.append(region)
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        tuple_out = isinstance(out_node.args[0], (tuple, list))
        try:
            translated = translate(sub, name)
        except Unsupported as e:
            return self._eager(region, f"not translated: {e}")
        region.fdsl = translated.text
        if self.dump is not None:
            (self.dump / f"{name}.fdsl").write_text(translated.text)
        target = self.target or _device_target(sub)
        opts = dict(self.options)
        if translated.symbols and target in ("cpu", "cuda"):
            opts["dynamic"] = sorted(set(opts.get("dynamic", ())) | set(translated.symbols))
        from fusec.program import compile_text

        def make(options):
            return compile_text(translated.text, f"<torch {name}>.fdsl", target=target, options=options or None,
                                **_compile_kwargs(self.compile_kwargs))
        try:
            program = make(opts)
        except (UsageError, FdslError) as e:         # (an OptionsError, the user's options, propagates)
            return self._eager(region, f"fusec refused its FDSL: {_first_error(e)}")
        static = None
        if "dynamic" in opts and "dynamic" not in self.options:
            static_opts = {k: v for k, v in opts.items() if k != "dynamic"}
            static = lambda: make(static_opts)          # noqa: E731
        return FusecRegion(translated, program, sub, region, tuple_out, self.dump, static, self.verify,
                           self.fresh_outputs)

    def _eager(self, region: Region, why: str):
        region.eager_reason = why
        return None

    def training(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        self.report.training += 1
        warnings.warn("fusec compiles inference graphs; this training graph runs eagerly "
                      "(call the model under torch.no_grad() or torch.inference_mode())", stacklevel=2)
        return make_boxed_func(gm.forward)

    def backward(self, gm, example_inputs):
        """A training graph's backward: eager too."""
        return _boxed(gm, example_inputs)


def _boxed(gm, example_inputs):
    from functorch.compile import make_boxed_func
    return make_boxed_func(gm.forward)


def _first_error(e: Exception) -> str:
    lines = str(e).splitlines()
    err = next((ln for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
    return err.split("error:", 1)[-1].strip()


def _compile_kwargs(kw: dict) -> dict:
    out = dict(kw)
    if "remote_cache" in out:
        out["remote_cache_url"] = out.pop("remote_cache")
    return out


def _device_target(gm) -> str:
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and v.device.type == "cuda":
            return "cuda"
    return "cpu"


def make_backend(options: dict | None = None, report: Report | None = None):
    """A dynamo backend (gm, example_inputs) -> callable running `gm` with fusec regions."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd
    b = Backend(options, report)
    compiler = aot_autograd(fw_compiler=b.training, bw_compiler=b.backward, inference_compiler=b.inference,
                            decompositions=core_aten_decompositions())
    compiler.fusec = b
    return compiler
