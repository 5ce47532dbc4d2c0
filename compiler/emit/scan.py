"""The scan template: a running sum or product along one axis in one pass, written whole for a
`linalg.generic` marked `fusec.scan` (its body evaluated at i = j = k with the running value as
accumulator). cpu: a prange over rows; gpu: a block per row along the contiguous last axis
(`emit_gpu`), else a thread per row (`emit_gpu_rows`). See docs/ARCHITECTURE.md, "GPU kernels",
Scans.
"""
from __future__ import annotations

from . import ids
from .template_values import affine, indexing_maps, load_element, n_inputs
from .values import EmitError
from ..mlir import ir
from ..marks import SCAN, SCAN_AXIS
from .. import combiners
from ..plan.hardware import WARP


def block_scan(body, op) -> None:
    body.need(op, "kernel", "cpu")
    _Scan(body, op).emit()


class _Scan:
    """The scan template at one `fusec.scan` op (module doc); its inputs are loaded as
    template_values.load_element reads an element."""

    def __init__(self, body, op):
        self.body, self.op = body, op
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        self.n_in = n_inputs(op)
        if len(op.operands) != self.n_in + 1:
            raise EmitError("a fusec.scan writes one output", op)
        self.maps = indexing_maps(op)
        self.out = body.view(op.operands[self.n_in])
        self.rank = len(self.out.shape)
        self.axis = ir.IntegerAttr(op.attributes[SCAN_AXIS]).value
        self.block = op.regions[0].blocks[0]
        self.inner = [o.operation for o in self.block.operations]
        last = self.inner[-1]
        if last.name != "linalg.yield" or len(last.operands) != 1:
            raise EmitError("a fusec.scan body ends in one linalg.yield", op)
        self.result = last.operands[0]
        combine = self.result.owner
        acc = self.block.arguments[self.n_in]
        if isinstance(combine, ir.Block) or acc not in list(combine.operands):
            raise EmitError("a fusec.scan body yields the combine of its accumulator", op)
        self.combine = combine.operation if hasattr(combine, "operation") else combine
        self.elem = self.out.array.elem
        kind = ir.StringAttr(op.attributes[SCAN]).value
        form = combiners.of_scan(kind, "emit").form(self.elem.kind, "emit")      # its neutral: -0 + x is x
        consts = self.ctx.consts
        self.neutral = (consts.float(float(form.value()), self.elem) if self.elem.kind == "float"
                        else consts.int(form.value(self.elem.bits), self.elem))

    def comb(self, a: str, b: str) -> str:
        e = self.ctx.rules.expr(self.combine, [a, b])
        if e is None:
            raise EmitError(f"the emitter has no rule for the combiner {self.combine.name}", self.op)
        return e

    def element(self, k: str, idx: dict[int, str], acc: str) -> str:
        """The body at i = j = k for the row `idx` (dim -> index), accumulating onto `acc`."""
        dims = [k if d == self.axis else idx[d] for d in range(self.rank)] + [k]
        for i, arg in enumerate(list(self.block.arguments)[:self.n_in]):
            e = load_element(self.body.view(self.op.operands[i]), [affine(r, dims) for r in self.maps[i].results])
            name = self.names.temp("x")
            self.w(f"{name} = {e}")
            self.ctx.expr[arg] = name
        self.ctx.expr[self.block.arguments[self.n_in]] = acc
        for inner in self.inner[:-1]:
            if inner.name == "linalg.index":
                self.ctx.expr[inner.results[0]] = dims[ir.IntegerAttr(inner.attributes["dim"]).value]
            else:
                self.body.op(inner)
        return self.body.val(self.result)

    def unravel(self, flat: str) -> dict[int, str]:
        """The row's index per dim but the axis, from its number (row-major)."""
        idx, stride = {}, 1
        for d in reversed([d for d in range(self.rank) if d != self.axis]):
            n = self.out.shape[d]
            idx[d] = f"({flat} // {stride}) % {n}" if stride > 1 else f"{flat} % {n}"
            stride = f"{stride} * {n}" if not (str(stride).isdigit() and str(n).isdigit()) else int(stride) * int(n)
        return idx

    def rows(self) -> str:
        n = 1
        for d in range(self.rank):
            if d != self.axis:
                n = f"{n} * {self.out.shape[d]}" if not (str(n).isdigit() and str(self.out.shape[d]).isdigit()) \
                    else int(n) * int(self.out.shape[d])
        return str(n)

    def store(self, k: str, idx: dict[int, str], value: str) -> str:
        return self.out.store([k if d == self.axis else idx[d] for d in range(self.rank)], value)

    def emit(self) -> None:
        kind = ir.StringAttr(self.op.attributes[SCAN]).value
        n = self.out.shape[self.axis]
        self.w(f"# {SCAN} {kind} along axis {self.axis}: {self.rows()} rows of {n}")
        if self.body.mode == "cpu":
            self.emit_cpu(n)
        elif self.axis == self.rank - 1:
            self.emit_gpu(n)
        else:
            self.emit_gpu_rows(n)

    def emit_cpu(self, n: str) -> None:
        w = self.w
        r = self.names.temp("row")
        w(f"for {r} in {self.body.range_fn()}(0, {self.rows()}):")      # a start: a signed index (emit/control.py)
        with w.indent():
            self.body.parallel_depth += 1
            self._walk_row(r, n)
            self.body.parallel_depth -= 1

    def emit_gpu_rows(self, n: str) -> None:
        """A thread per row (the axis is not the contiguous one): consecutive threads take
        consecutive rows, side by side along the last axis, so each step's accesses coalesce."""
        w = self.w
        T = self._threads()
        r = self.names.temp("row")
        w(f"{r} = {ids.block_id('x')} * {T} + {ids.thread_id('x')}")
        w(f"if {r} < {self.rows()}:")
        with w.indent():
            self._walk_row(r, n)

    def _walk_row(self, r: str, n: str) -> None:
        """Row number `r` walked in order: the running value after each element, stored."""
        w, names = self.w, self.names
        k, acc = names.temp("k"), names.temp("acc")
        idx = {d: self._bind(e) for d, e in self.unravel(r).items()}
        w(f"{acc} = {self.neutral}")
        w(f"for {k} in range({n}):")
        with w.indent():
            w(f"{acc} = {self.element(k, idx, acc)}")
            w(self.store(k, idx, acc))

    def _warp_scan(self, value: str, up: str, lane: str, width: int) -> None:
        """An inclusive scan of `value` over a warp's first `width` lanes (Kogge-Stone with
        shfl_up_sync: after the step of offset d each lane holds the combine of its last 2d)."""
        off = 1
        while off < width:
            self.w(f"{up} = cuda.shfl_up_sync(0xFFFFFFFF, {value}, {off})")
            self.w(f"if {lane} >= {off}:")
            with self.w.indent():
                self.w(f"{value} = {self.comb(up, value)}")
            off *= 2

    def _threads(self) -> int:
        dims = self.ctx.block_dims
        T = int(str(dims[0])) if dims and str(dims[0]).isdigit() else None
        if T is None or any(str(d) != "1" for d in dims[1:]):
            raise EmitError(f"a fusec.scan runs in blocks of T x 1 x 1 threads, not {dims}", self.op)
        return T

    def _bind(self, e: str) -> str:
        name = self.names.temp("r")
        self.w(f"{name} = {e}")
        return name

    def emit_gpu(self, n: str) -> None:
        """A block of T threads per row, the row in chunks of T elements. Per chunk thread t
        evaluates element c*T + t, the block takes an inclusive scan of the chunk, adds the
        carry of the chunks before, stores, and the carry grows by the chunk's total. The block
        scan: each warp scans its 32 values with `shfl_up_sync`, lane 31 puts the warp's total
        in a shared slot, warp 0 scans the slots the same way, and each warp adds the total of
        the warps before it; under the simulator (no warp shuffles) and for a T that is not a
        warp multiple, a Hillis-Steele scan in shared memory (log2 T steps, a barrier each)."""
        w, names, comb = self.w, self.names, self.comb
        T = self._threads()
        self.ctx.helpers.cudasim = True
        compute = self.elem.compute
        warps = max(1, -(-T // WARP))
        t, c, k = ids.thread_id("x"), names.temp("c"), names.temp("k")
        idx = {d: self._bind(e) for d, e in self.unravel(ids.block_id("x")).items()}
        buf, slots = names.temp("buf"), names.temp("slots")
        w(f"{buf} = cuda.shared.array({T}, numba.{compute})")
        w(f"{slots} = cuda.shared.array({warps}, numba.{compute})")
        carry, v, s, total = names.temp("carry"), names.temp("v"), names.temp("s"), names.temp("total")
        w(f"{carry} = {self.neutral}")
        w(f"for {c} in range(({n} + {T - 1}) // {T}):")
        with w.indent():
            w(f"{k} = {c} * {T} + {t}")
            w(f"{v} = {self.neutral}")
            w(f"if {k} < {n}:")
            with w.indent():
                w(f"{v} = {self.element(k, idx, self.neutral)}")
            w(f"if _CUDASIM or {T % WARP}:")           # Hillis-Steele in shared memory
            with w.indent():
                other = names.temp("other")
                w(f"{buf}[{t}] = {v}")
                w("cuda.syncthreads()")
                off = 1
                while off < T:
                    w(f"{other} = {buf}[{t} - {off}] if {t} >= {off} else {self.neutral}")
                    w("cuda.syncthreads()")
                    w(f"{buf}[{t}] = {comb(other, f'{buf}[{t}]')}")
                    w("cuda.syncthreads()")
                    off *= 2
                w(f"{s} = {buf}[{t}]")
                w(f"{total} = {buf}[{T - 1}]")
                w("cuda.syncthreads()")
            w("else:")
            with w.indent():
                lane, warp, up, x = names.temp("lane"), names.temp("warp"), names.temp("up"), names.temp("x")
                w(f"{lane} = {t} % {WARP}")
                w(f"{warp} = {t} // {WARP}")
                w(f"{s} = {v}")
                self._warp_scan(s, up, lane, WARP)
                w(f"if {lane} == {WARP - 1}:")
                with w.indent():
                    w(f"{slots}[{warp}] = {s}")
                w("cuda.syncthreads()")
                if warps > 1:
                    w(f"if {warp} == 0:")
                    with w.indent():
                        w(f"{x} = {slots}[{lane}] if {lane} < {warps} else {self.neutral}")
                        self._warp_scan(x, up, lane, warps)
                        w(f"if {lane} < {warps}:")
                        with w.indent():
                            w(f"{slots}[{lane}] = {x}")
                    w("cuda.syncthreads()")
                    w(f"if {warp} > 0:")
                    with w.indent():
                        w(f"{s} = {comb(f'{slots}[{warp} - 1]', s)}")
                w(f"{total} = {slots}[{warps - 1}]")
                w("cuda.syncthreads()")
            w(f"{s} = {comb(carry, s)}")
            w(f"if {k} < {n}:")
            with w.indent():
                w(self.store(k, idx, s))
            w(f"{carry} = {comb(carry, total)}")
