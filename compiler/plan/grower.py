"""The grower: one kernel grown from its root, consumers first (docs/ARCHITECTURE.md, "Stages and what each hands on" (plan)).

`Grower(...).grow()` proposes the root's producers, largest id first, and keeps each that the
structural guards allow and the model says pays for itself; each choice is a `Decision`. The
guards: fills and pads travel with their consumer; one contraction per kernel; a producer used
outside joins only as a second output (`second_output_error`), and an elementwise one whose
users are all in other kernels is left to recompute.py; no scans, no split-reduction partials,
nothing read at computed indices, nothing that leaves no loop to split across blocks.
"""
from __future__ import annotations

import heapq

from .analysis import ChainInfo, OpInfo, tileable_loops
from .cost import CHEAP, KernelCost, op_flops, with_cheap_producers
from .decisions import Decision, KernelRef
from .describe import bytes_text, signed_time_text, time_text
from .kernels import loc_text
from .tilechoice import TileChooser


class Grower:
    """Grow one kernel from its root: propose producers, largest id first; keep each that the
    model says pays for itself."""

    def __init__(self, info: ChainInfo, chooser: TileChooser, root: OpInfo, assigned, fuse: bool,
                 decisions: list[Decision], gid: int):
        self.info, self.chooser, self.root = info, chooser, root
        self.assigned, self.fuse, self.decisions, self.gid = assigned, fuse, decisions, gid
        self.members = set(with_cheap_producers(info, root.id))
        self.contractions = 1 if root.kind == "contraction" else 0

    def grow(self) -> set[int]:
        heap: list[int] = []
        edges: dict[int, int] = {}

        def propose(consumer: int) -> None:
            for p in self.info.op(consumer).producers:
                if p is not None and p not in self.members and p not in edges:
                    edges[p] = consumer
                    heapq.heappush(heap, -p)

        propose(self.root.id)
        while heap:
            p = -heapq.heappop(heap)
            if self._consider(self.info.op(p)):
                propose(p)
        return self.members

    def _consider(self, prod: OpInfo) -> bool:
        """Fuse `prod` if it pays; True when a compute op joined (its producers are proposed next)."""
        p, info, gid = prod.id, self.info, self.gid
        if prod.kind in CHEAP:
            self.members.add(p)
            return False
        if prod.kind == "view" and self.fuse:
            self._view_stop(prod)
            return False
        if p in self.assigned or not self.fuse:
            return False
        who = f"%{p} {prod.label}"
        outside = [u for u in prod.users if u not in self.members]
        shown = ", ".join("the chain's result" if u == -1 else f"%{u}" for u in outside)
        if outside:                          # fused, the kernel writes it too (a second output), or not at all
            why = self._second_output_error(prod, outside)
            if why:
                self._refuse(prod, f"also used by {shown} ({why})")
                return False
        if self.root.scan or prod.scan:
            tail = " (it runs each row in order; elementwise producers are already part of its body)"
            self._refuse(prod, ("kernel ", KernelRef(gid), " is a scan" + tail) if self.root.scan else
                         "a scan is computed whole, by a kernel of its own" + tail)
            return False
        gathers = sorted(m for m in self.members if p in info.op(m).indirect_ops)
        if gathers:
            self._refuse(prod, f"%{gathers[0]} reads it at computed "
                         "indices (a gather, concat or reversed slice), so it is written first")
            return False
        if prod.kind == "contraction" and self.contractions:
            self._refuse(prod, "one contraction per kernel")
            return False
        written = sorted(m for m in self.members if m != self.root.id and info.op(m).is_compute
                         and any(u == -1 or u not in self.members for u in info.op(m).users))
        if prod.kind == "contraction" and written:
            self._refuse(prod, f"the kernel also writes %{written[0]} for "
                         "its users outside it, and a contraction kernel writes its root only")
            return False
        if prod.note.startswith("split-reductions"):
            self._refuse(prod, f"it is the first stage of a two-stage "
                         f"reduction (its partials spread the work over the grid)")
            return False
        shared = self._shared_init(prod)
        if shared is not None:
            # tile-and-fuse initialises a fill shared by the root and a producer only once, for
            # the producer, and leaves the root's accumulator uninitialised (nll at B=C=64)
            self._refuse(prod, f"it shares its init %{shared} with the "
                         f"root's accumulator, which the tiling would then leave uninitialised")
            return False
        alone = with_cheap_producers(info, p)
        trial = frozenset(self.members | alone)
        if tileable_loops(info, self.root.id, self.members) and not tileable_loops(info, self.root.id, trial):
            self._refuse(prod, f"the kernel would have no loop left "
                         f"to split across blocks (it reduces every loop of %{self.root.id})")
            return False
        if outside and not any(self.chooser.best(trial).tiling.block):
            self._refuse(prod, f"also used by {shown} (a kernel of one "
                         "block, untiled, writes its root only)")
            return False
        if self._no_row_kernel_to_write(trial):
            self._refuse(prod, f"the kernel would write an elementwise "
                         "result of the chain, which on the gpu only a row kernel stores, and it would "
                         "have no row-kernel tiling")
            return False
        fused = self.chooser.best(trial).cost
        now = self.chooser.offer(frozenset(self.members), self.chooser.best(trial).tiling).cost
        apart = self.chooser.best(alone).cost
        delta = fused.time_s - now.time_s - apart.time_s
        saved = now.bytes + apart.bytes - fused.bytes
        if delta < 0:
            self.members |= alone
            self.contractions += prod.kind == "contraction"
            also = f", which also writes it for {shown}" if outside else ""
            self.decisions.append(Decision("fused", who, f"saves {_saved(saved, prod)} and a launch, "
                                           f"{signed_time_text(delta)}", (p,), (gid,), " into kernel", also,
                                           (("time_s", delta), ("bytes_saved", saved))))
            return True
        self._refuse(prod, f"{self._reason(prod, now, apart, fused)} (saves {_saved(saved, prod)}; net "
                     f"{signed_time_text(delta)})", (("time_s", delta), ("bytes_saved", saved)))
        return False

    def _refuse(self, prod: OpInfo, reason, numbers: tuple = ()) -> None:
        """Say that `prod` is not fused into this kernel, and why."""
        self.decisions.append(Decision("not fused", f"%{prod.id} {prod.label}", reason, (prod.id,), (self.gid,),
                                       " into kernel", numbers=numbers))

    def _no_row_kernel_to_write(self, members: frozenset) -> bool:
        """On the gpu, whether `members` would return an elementwise result besides the root
        (a second output only split_rows stores) with no row-kernel tiling among its candidates."""
        info = self.info
        if self.chooser.target != "gpu" or not any(
                m != self.root.id and info.op(m).kind == "elementwise" and -1 in info.op(m).users for m in members):
            return False
        choice = self.chooser.best(members)
        return not choice.tiling.config.row_outputs and not any(c.config.row_outputs for c, _ in choice.candidates)

    def _second_output_error(self, prod: OpInfo, outside: list[int]) -> str | None:
        """Why the kernel cannot compute `prod` and also write it for its users outside (None: it
        can). tile-and-fuse then gives the kernel's loop a second result (fuse_into_containing_op
        adds one for uses after the loop)."""
        info = self.info
        if any(info.op(m).kind == "contraction" for m in self.members) or prod.kind == "contraction":
            return "a contraction kernel writes its root only"
        if prod.kind == "elementwise" and -1 not in outside:
            return ("whether every kernel that uses it computes it is weighed once all kernels are grown")
        early = [u for u in outside if u != -1 and u < self.root.id]
        if early:
            return f"%{early[0]} runs before this kernel's root %{self.root.id}"
        inside = sorted(u for u in prod.users if u in self.members)
        copies = read_paths(info, prod.id, self.members) if prod.kind == "reduction" and inside else 0
        if copies > 1:
            # horizontal.written_reduction_read_twice
            return (f"the kernel reads it {copies} times (through "
                    f"%{', %'.join(map(str, inside))}), and only one of the copies tile-and-fuse makes "
                    "for them would be initialised")
        row = (prod.kind == "elementwise" and self.chooser.target == "gpu" and
               self.chooser.best(frozenset(self.members | with_cheap_producers(info, prod.id))).tiling.config.row_outputs)
        return second_output_error(prod, self.chooser.target, row)

    def _view_stop(self, view: OpInfo) -> None:
        """Say why a reshape between a compute op and this kernel stops their fusion (the
        hoist-reshapes pass moves the ones it can onto their producers' inputs)."""
        src = view.producers[0]
        while src is not None and self.info.op(src).kind == "view":   # a reshape is a collapse, then an expand
            view = self.info.op(src)
            src = view.producers[0]
        if src is None or not self.info.op(src).is_compute or src in self.assigned:
            return
        prod = self.info.op(src)
        ident = tuple(frozenset({i}) for i in range(len(prod.loops)))
        reads_own_shape = all(d in (ident, ()) for d in prod.operand_loops[:prod.n_inputs])
        why = _view_reason(prod.kind, reads_own_shape, len(prod.users) > 1)
        self._refuse(prod, f"the reshape %{view.id} ({loc_text(view.loc)}) between them stops fusion: {why}")

    def _shared_init(self, prod: OpInfo) -> int | None:
        """The fill that initialises both `prod` and the root of a tiled reduction/contraction."""
        if self.root.kind not in ("reduction", "contraction") or prod.kind not in ("reduction", "contraction"):
            return None
        inits = {p for p in self.root.producers[self.root.n_inputs:] if p is not None and self.info.op(p).kind == "fill"}
        mine = {p for p in prod.producers[prod.n_inputs:] if p is not None and self.info.op(p).kind == "fill"}
        both = inits & mine
        return min(both) if both and tileable_loops(self.info, self.root.id, self.members) else None

    def _reason(self, prod: OpInfo, now: KernelCost, apart: KernelCost, fused: KernelCost) -> str:
        hw = self.chooser.hw
        d_recompute = fused.recompute_s - now.recompute_s - apart.recompute_s
        d_spill = fused.spill_s - now.spill_s - apart.spill_s
        if d_recompute >= d_spill and d_recompute > 0:
            times = 1 + (fused.recompute_flops - now.recompute_flops) / max(op_flops(prod, hw), 1e-30)
            return f"recompute {times:.3g}x {prod.label} costs {signed_time_text(d_recompute)}"
        if d_spill > 0:
            where = (f"{hw.onchip_per_unit // 1024} KiB of shared memory/L1 per SM" if hw.kind == "gpu"
                     else f"{hw.onchip_per_unit // 1024} KiB L2 of a core")
            per = "per thread" if hw.kind == "gpu" else "per tile"
            return (f"its on-chip intermediates ({bytes_text(fused.onchip_bytes)} {per}) overflow the {where}: "
                    f"spilling {bytes_text(fused.bytes_spilled)} costs {signed_time_text(d_spill)}")
        return (f"predicted {time_text(fused.time_s)} fused against {time_text(now.time_s)} + {time_text(apart.time_s)} "
                f"apart ({fused.bound}-bound, occupancy {fused.occupancy:.0%})")


def _view_reason(producer_kind: str, reads_own_shape: bool, other_users: bool) -> str:
    """Why a reshape of a producer's result stays between it and its consumer (what
    transforms/hoist_reshapes.py cannot move)."""
    if producer_kind != "elementwise":
        return f"a reshape of a {producer_kind}'s result is not a view of its inputs"
    if other_users:
        return "its producer has other users (moving the reshape would compute it twice)"
    if not reads_own_shape:
        return "its producer broadcasts or transposes an input, so the reshape cannot move onto its inputs"
    return "its body reads its loop indices"


def _saved(nbytes: float, prod: OpInfo) -> str:
    size = prod.result_bytes
    k = nbytes / size if size else 0
    if size and 0.95 <= k <= 4.05 and abs(k - round(k)) < 0.05:
        return f"{round(k)}x{bytes_text(size)}"
    return bytes_text(nbytes)


def second_output_error(prod: OpInfo, target: str, row: bool = False) -> str | None:
    """What tile-and-fuse and the emitter carry through as a kernel's second output: a reduction
    (its value goes out once per row), an elementwise result on the cpu, and on the gpu one in a
    row kernel (`row`: split_rows gives it a phase that stores it). Why not, for `prod`; None
    when it can be. (The thread level of other GPU kernels cannot store an elementwise value
    for the outside.)"""
    if prod.kind == "elementwise" and target == "gpu" and not row:
        return "on the gpu a kernel writes a second elementwise output only when it is a row kernel"
    if prod.kind not in ("elementwise", "reduction"):
        return f"a {prod.kind} is written by a kernel of its own"
    return None


def read_paths(info: ChainInfo, m: int, members) -> int:
    """How many copies of `m` tile-and-fuse makes in a kernel of `members`: one per reader, and
    an elementwise reader fused once per its own readers reads it once per copy
    (`t0 = x - max(x); t1 = t0 + argmax(t0)`: t0 is read by the argmax's two reductions and t1)."""
    n = 0
    for u in info.op(m).users:
        if u in members:
            inner = read_paths(info, u, members) if info.op(u).kind == "elementwise" else 1
            n += max(1, inner)
    return n
