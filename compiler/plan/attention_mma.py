"""The tensor-core form of the attention template (FlashAttention-2's structure on mma.sync):
when it applies, its tiles, shared memory, registers and time per key step. The emitter is
emit/attention_mma.py; docs/ARCHITECTURE.md, "Attention kernels".

Four warps (the template's 16 x 8 = 128 threads), each owning 16 query rows of a 64-query
block; Q·Kᵀ and P·V on mma.sync.m16n8k16 with f32 accumulators, Q's fragments loaded once,
K and V through a 2-stage ring of 16-bit swizzled shared tiles, P kept in registers.
"""
from __future__ import annotations

import math

from .attention import _const_float, _producer
from .hardware import WARP

MMA_BQ = 64             # 4 warps x 16 query rows
MMA_WARPS = 4
MMA_STAGES = 2          # K/V tiles in flight: the step computed and the one being copied


def mma_attention_error(info, a, bq: int | None = None, hw=None) -> str | None:
    """Why attention kernel `a` does not run on tensor cores (None: it does, at `bq` queries
    per block where given): Q, K and V all f16 or all bf16, the scores a plain multiply-add of
    the two operands into f32, head dims multiples of 16 (mma's k16 and two n8 tiles), no
    Σ_j V_j kept for a fully-masked-row guard other than SDPA's, and a device with tensor cores."""
    s, o = info.op(a.scores), info.op(a.out)
    dts = {s.operand_dtypes[0], s.operand_dtypes[1], o.operand_dtypes[a.v_operand]}
    if len(dts) != 1 or not dts <= {"f16", "bf16"}:
        return "Q, K and V are not all f16 or all bf16"
    if hw is not None and not (hw.mma_sync_flops() if hasattr(hw, "mma_sync_flops") else 0):
        return f"{hw.name} has no tensor cores in its profile"
    body = [b for b in s.body_ops if b != "linalg.yield"]
    if s.n_inputs != 2 or sorted(set(body) - {"arith.extf"}) != ["arith.addf", "arith.mulf"] \
            or body.count("arith.mulf") != 1:
        return "its scores are not a plain multiply-add of Q and K"
    if a.d % 16 or a.dv % 16:
        return f"head dims {a.d} and {a.dv} are not multiples of 16 (mma.sync's k16)"
    if a.guard is not None and not (a.guard[0] == float("-inf") and a.guard[1] == 0.0):
        return "its fully-masked-row guard keeps a column sum of V"
    if bq is not None and bq != MMA_BQ:
        return f"{bq} queries per block (the tensor-core form takes {MMA_BQ}: 4 warps of 16 rows)"
    return None


def attention_mma_kind(info, a, bq: int, hw=None) -> str:
    """'f16' | 'bf16' when the kernel at `bq` queries per block runs on tensor cores, else ''."""
    return "" if mma_attention_error(info, a, bq, hw) else info.op(a.scores).operand_dtypes[0]


def mma_tiles(a) -> list[tuple[int, int]]:
    """The tensor-core form's tiles: 64 queries, keys in steps of 64 or 32."""
    return [(MMA_BQ, bkv) for bkv in (64, 32) if bkv <= max(32, 2 * a.sk)]


def mma_shared_bytes(d: int, dv: int, bkv: int) -> int:
    """Q's tile, and MMA_STAGES tiles of K and of V, 16-bit: rows of 16-byte chunks (an odd
    number of chunks gets one of padding: emit/mma.py SwizzledTile's stride)."""
    def stride(w):
        c = w // 8
        return w if c & (c - 1) == 0 or c % 2 else w + 8
    return 2 * (MMA_BQ * stride(d) + MMA_STAGES * bkv * (stride(d) + stride(dv)))


def mma_registers(d: int, dv: int, bkv: int) -> int:
    """Registers per thread: ~32 for addresses, ids and row statistics and the live values X:
    the scores' accumulators (bkv / 2), the output's (dv / 2) and Q's fragments (d / 4), with
    ptxas's growing share of temporaries as X grows (X^2 / 128): fitted to ptxas -v for sm_90
    (96-126 at D = 64, BKV = 32; 254, no spill, at D = 128, BKV = 64)."""
    x = bkv // 2 + dv // 2 + d // 4
    return min(255, 32 + x + x * x // 128)


def mma_step_instructions(d: int, dv: int, bkv: int, score_flops: float, elem_copies: bool) -> dict:
    """Warp instructions per key step of one warp (its 16 rows), by kind, as the emitted step
    issues them (emit/attention_mma.py): HMMA for both products, LDSM for K (x4: two n8 tiles
    of k16) and V (x4.trans), the score function and the online softmax on the lane's bkv / 2
    scores, P packed to 16 bits (F2FP), the rescale of the dv / 2 accumulators, the quad's
    shuffles, and the copies of K and V (16-byte cp.async, or 2-byte loads and stores where an
    operand's rows are not whole 16-byte runs)."""
    per = bkv // 2                                     # a lane's scores
    hmma = (d // 16) * (bkv // 8) + (bkv // 16) * (dv // 8)
    ldsm = (d // 16) * (bkv // 16) + (bkv // 16) * (dv // 16)
    sfu = per + 2
    # a score: its function, the max, exp(z - m) (FFMA, MUFU), the sum, the 16-bit roundings
    # the f16/bf16 ops keep (F2F pairs): ~2 per flop of the score function plus ~24 (fitted to
    # the SASS of the bench's f16 kernels: 630 instructions a step at D = 64, BKV = 32, 1,357
    # at D = 128, BKV = 64, ~30 a score)
    elementwise = per * (2 * score_flops + 24) + bkv // 4 + dv // 2 + 2 * 8 + 20
    halves = bkv * (d + dv)
    copies = halves / WARP / (1 if elem_copies else 8) / MMA_WARPS * (2 if elem_copies else 1)
    return {"hmma": hmma, "ldsm": ldsm, "sfu": sfu, "other": elementwise + 3 * copies, "copies": copies}


def mma_step_cycles(hw, d: int, dv: int, bkv: int, score_flops: float, elem_copies: bool,
                    measured_issue: float | None = None) -> tuple[float, dict]:
    """Cycles one block's key step occupies an SM (its 4 warps), the larger of the tensor cores'
    time at mma.sync's ceiling and the issue of every instruction on the 4 schedulers (a warp's
    step: `measured_issue`, the SASS key loop's instructions, where the kernel report has them)."""
    n = mma_step_instructions(d, dv, bkv, score_flops, elem_copies)
    flops = 2.0 * MMA_BQ * bkv * (d + dv)
    per_cycle = hw.mma_sync_flops() / (hw.units * hw.clock_hz)
    issue = MMA_WARPS * (measured_issue or (n["hmma"] + n["ldsm"] + n["sfu"] + n["other"] + n["copies"]))
    sfu = MMA_WARPS * n["sfu"] * WARP / 16            # 16 SFU lanes per SM quarter x 4
    return max(flops / per_cycle, issue / 4, sfu / 4), n


def _strip(tree, names=("truncf", "extf", "index_cast")):
    while isinstance(tree, tuple) and tree and tree[0] in names:
        tree = tree[1]
    return tree


def _loop(info, op, tree) -> int | None:
    """The loop of `op` that body value `tree` is: ("index", n), or an operand read at one loop
    from an op whose value is its own index (an `arange`: docs/FDSL.md)."""
    tree = _strip(tree)
    if tree and tree[0] == "index":
        return tree[1]
    if not tree or tree[0] != "in":
        return None
    p = _producer(info, op.operand_keys[tree[1]])
    loops = op.operand_loops[tree[1]]
    if p is None or p.kind != "elementwise" or len(p.body_expr) != 1 or len(loops) != 1 or len(loops[0]) != 1:
        return None
    if _strip(p.body_expr[0]) != ("index", 0) or len(p.result_loops) != 1:
        return None
    return next(iter(loops[0]))


def causal_mask(info, a) -> bool:
    """Whether Z (the exponentials' operand) is where(i >= j, ..., -inf) (or i > j, j <= i,
    j < i), i and j the query and key indices: the key tiles past a block's last query are all
    -inf and skipped (emit/attention_mma.py: causal_key, the emitter's reading of the same)."""
    e = info.op(a.exp)
    z = _producer(info, e.operand_keys[a.z_operand])
    if z is None or z.kind != "elementwise" or len(z.body_expr) != 1:
        return False
    t = _strip(z.body_expr[0], ("truncf", "extf"))
    if not t or t[0] != "select" or not t[1] or not str(t[1][0]).startswith("cmpi:"):
        return False
    neg = _strip(t[3], ("truncf", "extf"))
    if _const_float(neg) != float("-inf"):
        return False
    pred = int(t[1][0].split(":")[1])
    x, y = _loop(info, z, t[1][1]), _loop(info, z, t[1][2])
    out = [next(iter(r)) if len(r) == 1 else None for r in z.result_loops]
    s_out = [next(iter(r)) if len(r) == 1 else None for r in info.op(a.scores).result_loops]
    if x not in out or y not in out:
        return False
    xs, ys = s_out[out.index(x)], s_out[out.index(y)]
    return pred in {(a.q_loop, a.k_loop): (4, 5, 8, 9), (a.k_loop, a.q_loop): (2, 3, 6, 7)}.get((xs, ys), ())


def causal_steps(sq: int, sk: int, bkv: int) -> float:
    """Key steps a block runs on average when key tiles above the diagonal are skipped: block q
    reads keys below min(sk, 64 (q + 1))."""
    nq = math.ceil(sq / MMA_BQ)
    return sum(math.ceil(min(sk, MMA_BQ * (q + 1)) / bkv) for q in range(nq)) / nq
