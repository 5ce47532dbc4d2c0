"""Attention kernels: a softmax-normalised operand of a contraction over the softmax's own axis.

The matcher reads the generic ops' algebra, not names: S = Q · Kᵀ, Z = f(S, ...) elementwise,
M = max_j Z, E = exp(Z - M), L = sum_j E, P = E / L (or folded into O's body), O = P · V, P
possibly in the fully-masked-row guard where(M == C, K, P) that SDPA's decomposition leaves
(`_unguard`). It gives an `Attention` when online softmax computes the same O (the
intermediates have no other user), else a `NotAttention` saying which condition fails. See
docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (attention kernels);
docs/FUSION.md, "Attention".
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from .analysis import CONVS, ChainInfo, OpInfo

NEG_INF = ("0xFF800000", "-inf", "0xFFF0000000000000")


@dataclass(frozen=True)
class Attention:
    scores: int                 # the contraction S = Q · Kᵀ
    out: int                    # the contraction O = P · V
    max: int                    # M = max_j Z
    sum: int                    # L = sum_j E
    exp: int                    # E = exp(Z - M)
    norm: int | None            # P = E / L (None: folded into `out`'s body)
    score_ops: tuple[int, ...]  # the elementwise ops from S to Z, in program order
    ops: tuple[int, ...]        # every op of the kernel: the above, their fills and views
    z_operand: int              # E's operand that is Z
    v_operand: int              # `out`'s operand that is V
    q_loop: int                 # of `scores`: the query loop (i)
    k_loop: int                 # of `scores`: the key loop (j)
    d_loop: int                 # of `scores`: the head dim it contracts
    batch_loops: tuple[int, ...]    # of `scores`: the loops all its operands share
    sq: int                     # queries, keys, head dims (d of Q/K, dv of V)
    sk: int
    d: int
    dv: int
    batch: int                  # batch·heads
    guard: tuple[float, float] | None = None    # (C, K): P = where(M == C, K, E / L), else None


class Mismatch(Enum):
    UNLIKE = "unlike"   # no softmax-normalised operand of a multiply-add contraction: not the pattern at all
    UNFIT = "unfit"     # the pattern, or most of it, that one online-softmax kernel cannot compute


@dataclass(frozen=True)
class NotAttention:
    """Why ops are not an attention kernel: what fails, in words (as plans print it), and its
    `kind`, which callers test."""
    text: str
    kind: Mismatch

    def __str__(self) -> str:
        return self.text


def _unlike(text: str) -> NotAttention:
    return NotAttention(text, Mismatch.UNLIKE)


def _unfit(text: str) -> NotAttention:
    return NotAttention(text, Mismatch.UNFIT)


def _resolve(info: ChainInfo, key: str) -> str:
    """The value a key names, through reshape views (keepdims forms)."""
    seen = 0
    while key.startswith("%") and seen < 64:
        op = info.op(int(key[1:].split(":")[0]))
        if op.kind != "view":
            return key
        key = op.operand_keys[0]
        seen += 1
    return key


def _producer(info: ChainInfo, key: str) -> OpInfo | None:
    key = _resolve(info, key)
    if not key.startswith("%"):
        return None
    return info.op(int(key[1:].split(":")[0]))


def _views_between(info: ChainInfo, key: str) -> list[int]:
    out = []
    while key.startswith("%"):
        op = info.op(int(key[1:].split(":")[0]))
        if op.kind != "view":
            break
        out.append(op.id)
        key = op.operand_keys[0]
    return out


def _plain(tree):
    """A tree without its value-preserving widenings (extf: f16 operands computed in f32) and
    the rounding of its result (truncf: an f16 result); the rest of the algebra is the same."""
    while tree and tree[0] in ("extf", "truncf"):
        tree = tree[1]
    if tree and tree[0] not in ("in", "out", "const", "index"):
        return (tree[0],) + tuple(_plain(t) for t in tree[1:])
    return tree


def _is_mac(tree) -> tuple | None:
    """addf(out0, mulf(a, b)) in either order: (a, b), else None."""
    tree = _plain(tree)
    if not tree or tree[0] != "addf":
        return None
    a, b = tree[1], tree[2]
    if a == ("out", 0):
        prod = b
    elif b == ("out", 0):
        prod = a
    else:
        return None
    if prod[0] != "mulf":
        return None
    return prod[1], prod[2]


def _is_one(tree) -> bool:
    try:
        return tree[0] == "const" and float(tree[1]) == 1.0
    except (TypeError, ValueError):
        return False


def _ratio(tree) -> tuple | None:
    """E / L as a softmax normalises: divf(E, L), or mulf(E, divf(1, L)) in either order (the
    built-in softmax: one division a row), E and L operands: their indices, else None."""
    t = _plain(tree)
    if t and t[0] == "divf" and t[1][0] == "in" and t[2][0] == "in":
        return t[1][1], t[2][1]
    if t and t[0] == "mulf":
        for a, b in ((t[1], t[2]), (t[2], t[1])):
            if a[0] == "in" and b[0] == "divf" and _is_one(b[1]) and b[2][0] == "in":
                return a[1], b[2][1]
    return None


def _const_float(tree) -> float | None:
    """The value of a ("const", text) tree (MLIR's decimal or hex bit-pattern form), else None."""
    if not tree or tree[0] != "const":
        return None
    text = tree[1]
    try:
        if text.lower().startswith("0x"):
            bits = int(text, 16)
            fmt = {6: ("<H", "<e"), 10: ("<I", "<f"), 18: ("<Q", "<d")}.get(len(text))
            if fmt is None:
                return None
            return float(struct.unpack(fmt[1], struct.pack(fmt[0], bits))[0])
        return float(text)
    except (ValueError, struct.error):
        return None


def _unguard(tree) -> tuple[tuple | None, tuple]:
    """The fully-masked-row guard SDPA leaves around a softmax, where(M == C, K, P):
    select(cmpf oeq (in m, const C) in either order, const K, P), or select(cmpf une (...), P,
    const K) (where(M != C, P, K)) -> ((m operand, C, K), P); any other tree -> (None, tree)."""
    t = _plain(tree)
    if not t or t[0] != "select" or len(t) != 4:
        return None, tree
    cond, k, p = t[1], t[2], t[3]
    if cond[0] == "cmpf:13":                 # une, where(M != C, P, K): the same select
        k, p = p, k
    elif cond[0] != "cmpf:1":                # oeq: a NaN row max is no match (the reference's NaN row)
        return None, tree
    a, b = cond[1], cond[2]
    m, c = (a, b) if a[0] == "in" else (b, a)
    cv, kv = _const_float(c), _const_float(k)
    if m[0] != "in" or cv is None or kv is None:
        return None, tree
    return (m[1], cv, kv), p


def _combines(op: OpInfo, fn: str) -> bool:
    """A reduction whose body is fn(in0, out0) (either order)."""
    if op.kind != "reduction" or len(op.body_expr) != 1:
        return False
    t = _plain(op.body_expr[0])
    return t[0] == fn and set(t[1:]) == {("in", 0), ("out", 0)}


def _init_fill(info: ChainInfo, op: OpInfo) -> OpInfo | None:
    p = _producer(info, op.operand_keys[op.n_inputs]) if len(op.operand_keys) > op.n_inputs else None
    return p if p is not None and p.kind == "fill" else None


def _reduced_dims(info: ChainInfo, op: OpInfo) -> set[int] | None:
    """Dims of the reduction's input value (before any view) that its reduction loops index."""
    red = {l for l, t in enumerate(op.iterators) if t == "reduction"}
    dims = {d for d, loops in enumerate(op.operand_loops[0]) if loops & red}
    return _source_dims(info, op.operand_keys[0], dims)


def _source_dims(info: ChainInfo, key: str, dims: set[int]) -> set[int] | None:
    """Dims of an operand read through reshape views, as dims of the value before the views
    (None when a dim is no single source dim)."""
    for v in _views_between(info, key):             # a keepdims view: back to the source's dims
        vd = info.op(v).view_dims
        mapped = set()
        for d in dims:
            if d >= len(vd) or vd[d] is None:
                return None
            mapped.add(vd[d])
        dims = mapped
    return dims


def _real(loops: list[int], extents) -> list[int]:
    """Loops without the unit ones a graph pass leaves (a batch of 1 folded away), unless all are."""
    big = [l for l in loops if extents[l] != 1]
    return big if big or len(loops) <= 1 else loops[:1]


def _leaves(tree, kind: str) -> set:
    """The operands ("in", k) or loops ("index", n) a body tree reads: their numbers."""
    if not isinstance(tree, tuple) or not tree:
        return set()
    if tree[0] == kind and len(tree) == 2 and isinstance(tree[1], int):
        return {tree[1]}
    out = set()
    for t in tree[1:]:
        out |= _leaves(t, kind)
    return out


def _side_loops(c1: OpInfo) -> list[frozenset] | None:
    """The loops each factor of the scores' multiply-add reads, Q's and K's: the loops of the
    operands in its tree and those it reads by index (a rotary embedding folded into the
    contraction reads Q at computed d, cos and sin at (i, d)); None when the two factors share
    an operand. A plain product of two operands is operand 0's and operand 1's loops."""
    mac = _is_mac(c1.body_expr[0])
    sides = []
    for tree in mac:
        loops = set(_leaves(tree, "index"))
        ins = _leaves(tree, "in")
        for k in ins:
            if c1.operand_loops[k]:
                loops |= frozenset().union(*c1.operand_loops[k])
        sides.append((ins, frozenset(loops)))
    if sides[0][0] & sides[1][0]:
        return None
    return [sides[0][1], sides[1][1]]


def find_attention(info: ChainInfo, out: int) -> Attention | NotAttention:
    """The attention pattern ending at contraction `out`, or why it is not one."""
    c2 = info.op(out)
    if c2.kind != "contraction" or c2.name in CONVS or len(c2.body_expr) != 1:
        return _unlike("not a contraction")
    mac = _is_mac(c2.body_expr[0])
    if mac is None:
        return _unlike("its body is not a multiply-add")
    # the normalised operand: P = E / L as an op of its own, or divf(E, L) inside the body; either
    # may sit in the fully-masked-row guard where(M == C, K, P) (`_unguard`), inside the body, in
    # P's op, or in an op of its own between P's op and the contraction
    guard, guard_key, where_op = None, None, None
    for k, t in enumerate(mac):
        g, inner = _unguard(t)
        if g is not None:
            guard, guard_key = (g[1], g[2]), c2.operand_keys[g[0]]
            mac = tuple(inner if x == k else mac[x] for x in range(2))
            break
    norm = None
    div = next((t for t in mac if _ratio(t) is not None), None)
    if div is None and any(t[0] == "divf" for t in mac):
        return _unlike("its body divides something other than two operands")
    if div is not None:
        v_tree = mac[1] if mac[0] is div else mac[0]
        if v_tree[0] != "in":
            return _unlike("its body divides something other than two operands")
        e_index, l_index = _ratio(div)
        e_key, l_key, p_index = c2.operand_keys[e_index], c2.operand_keys[l_index], None
        p_operand = e_index
    else:
        if mac[0][0] != "in" or mac[1][0] != "in":
            return _unlike("its body multiplies something other than two operands")
        found = None
        for pi, vi in ((mac[0][1], mac[1][1]), (mac[1][1], mac[0][1])):
            d = _producer(info, c2.operand_keys[pi])
            if d is None or d.kind != "elementwise" or len(d.body_expr) != 1:
                continue
            g, inner = _unguard(d.body_expr[0])
            if g is not None and guard is None and inner[0] == "in":
                # the guard as an op of its own, P's op before it
                n = _producer(info, d.operand_keys[inner[1]])
                if (n is not None and n.kind == "elementwise" and len(n.body_expr) == 1
                        and _ratio(n.body_expr[0]) is not None):
                    found = (pi, vi, n, (g[1], g[2]), d.operand_keys[g[0]], d.id)
                    break
            elif _ratio(inner) is not None and (g is None or guard is None):
                found = (pi, vi, d, (g[1], g[2]) if g else guard, d.operand_keys[g[0]] if g else guard_key, None)
                break
        if found is None:
            return _unlike("no operand is a division (softmax's normalisation)")
        p_index, vi, norm_op, guard, guard_key, where_op = found
        norm = norm_op.id
        v_tree = ("in", vi)
        e_index, l_index = _ratio(_unguard(norm_op.body_expr[0])[1])
        e_key, l_key = norm_op.operand_keys[e_index], norm_op.operand_keys[l_index]
        p_operand = p_index
    v_operand = v_tree[1]
    e_op, l_op = _producer(info, e_key), _producer(info, l_key)
    if l_op is None or not _combines(l_op, "addf"):
        return _unlike("the divisor is not a sum reduction")
    if e_op is None or e_op.kind != "elementwise" or len(e_op.body_expr) != 1:
        return _unlike("the numerator is not an elementwise op")
    if _resolve(info, l_op.operand_keys[0]) != _resolve(info, e_key):
        return _unfit("the divisor does not sum the numerator")
    t = _plain(e_op.body_expr[0])
    if t[0] != "exp" or t[1][0] != "subf" or t[1][1][0] != "in" or t[1][2][0] != "in":
        return _unlike("the numerator is not exp(z - m)")
    z_operand, m_operand = t[1][1][1], t[1][2][1]
    z_key = _resolve(info, e_op.operand_keys[z_operand])
    m_op = _producer(info, e_op.operand_keys[m_operand])
    if m_op is None or not (_combines(m_op, "maximumf") or _combines(m_op, "maxnumf")):
        return _unfit("the subtracted value is not a max reduction")
    if _resolve(info, m_op.operand_keys[0]) != z_key:
        return _unfit("the max is not taken over the exponentiated value")
    mf, lf = _init_fill(info, m_op), _init_fill(info, l_op)
    if mf is None or mf.fill_value is None or mf.fill_value != float("-inf"):
        return _unfit("the max reduction does not start from -inf")
    if lf is None or lf.fill_value != 0.0:
        return _unfit("the sum reduction does not start from 0")
    gm = _producer(info, guard_key) if guard_key is not None else None
    if guard_key is not None and (gm is None or gm.id != m_op.id):
        return _unfit("the fully-masked-row guard compares another value than the softmax's row max")
    # Z back to the scores contraction through elementwise ops on score-shaped values
    z_op = _producer(info, z_key)
    score_shape = e_op.result_shape
    score_ops: list[int] = []
    c1 = None
    todo = [z_op] if z_op is not None else []
    while todo:
        op = todo.pop()
        if op.kind == "contraction":
            if c1 is not None and c1.id != op.id:
                return _unfit("the scores come from two contractions")
            c1 = op
            continue
        if op.kind != "elementwise" or op.result_shape != score_shape:
            return _unfit(f"%{op.id} {op.label} between the contractions is not elementwise on the scores")
        if op.id in score_ops:
            continue
        score_ops.append(op.id)
        for k in range(op.n_inputs):
            p = _producer(info, op.operand_keys[k])
            if p is not None and op.operand_shapes[k] == score_shape and p.kind in ("elementwise", "contraction"):
                todo.append(p)
    if c1 is None:
        return _unfit("the scores are not a contraction")
    if c1.result_shape != score_shape or len(c1.body_expr) != 1 or _is_mac(c1.body_expr[0]) is None:
        return _unfit("the scores contraction is not a plain multiply-add")
    # loops of S = Q · Kᵀ
    red = _real([l for l, it in enumerate(c1.iterators) if it == "reduction"], c1.loops)
    if len(red) != 1:
        return _unfit("the scores contract more than one loop")
    used = _side_loops(c1)
    if used is None:
        return _unfit("the scores' two factors read a common operand")
    out_loops = list(c1.result_loops)
    if any(len(x) != 1 for x in out_loops):
        return _unfit("the scores' dims are not loops of their own")
    dims = [next(iter(x)) for x in out_loops]
    batch = tuple(l for l in dims if l in used[0] and l in used[1] and c1.loops[l] != 1)
    only = [_real([l for l in dims if l in used[k] and l not in used[1 - k]], c1.loops) for k in (0, 1)]
    if len(only[0]) != 1 or len(only[1]) != 1:
        return _unfit("the scores need one query and one key loop")
    # the softmax axis is the key axis, and the second contraction contracts it
    j_dim = out_loops.index(frozenset({only[1][0]}))
    for r in (m_op, l_op):
        if _reduced_dims(info, r) != {j_dim}:
            return _unfit("the softmax is not over the keys' axis")
    c2_red = set(_real([l for l, it in enumerate(c2.iterators) if it == "reduction"], c2.loops))
    p_dims = _source_dims(info, c2.operand_keys[p_operand],
                          {d for d, loops in enumerate(c2.operand_loops[p_operand]) if loops & c2_red})
    if p_dims != {j_dim} or len(c2_red) != 1:
        return _unfit("the second contraction does not contract the softmax's axis")
    # nothing but the kernel uses the intermediates
    members = {c1.id, m_op.id, e_op.id, l_op.id, out, *score_ops} | ({norm} if norm is not None else set())
    members |= {where_op} if where_op is not None else set()
    keys = [e_op.operand_keys[m_operand], e_key, l_key] + ([guard_key] if guard_key is not None else [])
    if where_op is not None:
        keys += info.op(where_op).operand_keys[:info.op(where_op).n_inputs]
    keys += [c2.operand_keys[k] for k in range(c2.n_inputs) if k != v_operand]
    for key in keys:
        members |= set(_views_between(info, key))
    for r in (m_op, l_op):
        members |= set(_views_between(info, r.operand_keys[0]))
    fills = set()
    for m in list(members):
        for k, p in enumerate(info.op(m).producers):
            if p is not None and info.op(p).kind == "fill" and k >= info.op(m).n_inputs:
                fills.add(p)
    for m in sorted(members - {out}):
        outside = [u for u in info.op(m).users if u not in members]
        if outside:
            who = "the output" if -1 in outside else f"%{outside[0]} {info.op(outside[0]).label}"
            what = {c1.id: "the scores", m_op.id: "the row max", l_op.id: "the row sum",
                    e_op.id: "the exponentials", norm: "the normalised scores",
                    where_op: "the guarded scores"}.get(m, f"%{m}")
            return _unfit(f"{what} are also used by {who} (online softmax keeps them on chip only)")
    shape = c1.loops
    sq, sk, d = shape[only[0][0]], shape[only[1][0]], shape[red[0]]
    c2_par = [l for l in range(len(c2.loops)) if c2.iterators[l] == "parallel"]
    v_loops = frozenset().union(*c2.operand_loops[v_operand])
    p_loops = frozenset().union(*c2.operand_loops[p_operand])
    dv_loops = _real([l for l in c2_par if l in v_loops and l not in p_loops], c2.loops)
    if len(dv_loops) != 1:
        return _unfit("the values need one head-dim loop")
    dv = c2.loops[dv_loops[0]]
    nb = 1
    for l in batch:
        nb *= shape[l]
    return Attention(c1.id, out, m_op.id, l_op.id, e_op.id, norm, tuple(sorted(score_ops)),
                     tuple(sorted(members | fills)), z_operand, v_operand, only[0][0], only[1][0], red[0],
                     batch, sq, sk, d, dv, nb, guard)


def attention_kernel(info: ChainInfo, members, target: str = "gpu") -> Attention | NotAttention:
    """The attention kernel that `members` are (with an elementwise epilogue after it), or why not,
    on `target`."""
    members = set(members)
    cs = [m for m in members if info.op(m).kind == "contraction"]
    if len(cs) != 2:
        return _unfit("not two contractions")
    a = find_attention(info, max(cs))
    if isinstance(a, NotAttention):
        return a
    rest = members - set(a.ops)
    for m in rest:
        op = info.op(m)
        if op.kind not in ("elementwise", "fill", "view"):
            return _unfit(f"%{m} {op.label} is neither part of the attention nor an elementwise op around it")
    after = {a.out} | {m for m in rest if m > a.out}
    for m in sorted(rest) if target == "cpu" else ():
        op = info.op(m)
        for k, p in enumerate(op.producers[:op.n_inputs]):
            # the cpu template evaluates the epilogue on each output of a block from its accumulators,
            # at its own element (the gpu one stages the outputs through shared memory first)
            if p in after and op.kind == "elementwise" and m > a.out and op.operand_loops[k] != op.result_loops:
                return _unfit(f"%{m} {op.label} reads %{p} at another element than its own (a transpose or "
                              "permute after the attention's output)")
    return a


# tiles: (queries per block, keys per step); threads are 16 rows x 8 columns
THREADS_X, THREADS_Y = 8, 16
SHARED_LIMIT = 48 * 1024


@dataclass(frozen=True)
class GpuLayout:
    """Where the gpu kernel keeps its tiles in shared memory (row strides in words) and what each
    thread holds (docs/ARCHITECTURE.md, "Attention kernels"). Thread (ty, tx) takes query rows
    ty + 16 a and keys tx + 8 c; its values are `groups` runs of `cw` adjacent columns,
    g (8 cw) + tx cw + {0..cw-1}, so each run is one LDS.64/LDS.128 and the 8 threads of a row
    read 8 cw adjacent words (no bank conflict).

    - Qs [bq][dp], Ks [bkv][k_stride], the head dim padded with zeros to dp (a multiple of 4):
      the scores read 4 adjacent d of a query (broadcast across the row's threads) and of each
      key with LDS.128; k_stride / 4 is odd, so the 8 keys tx + 8 c a quarter-warp reads start
      in 8 different groups of 4 banks.
    - Vs [bkv][v_stride], v_stride = groups 8 cw: P · V reads a thread's runs with LDS.128.
    - Ps [bq][p_stride], p_stride = 8 (mod 16): the 4 rows x 8 keys a warp writes fall in 32
      different banks; P · V reads 4 adjacent keys of a row with LDS.128 (broadcast)."""
    dp: int
    k_stride: int
    cw: int
    groups: int
    v_stride: int
    p_stride: int

    def words(self, bq: int, bkv: int) -> int:
        return bq * self.dp + bkv * self.k_stride + bkv * self.v_stride + bq * self.p_stride


def gpu_layout(d: int, dv: int, bq: int, bkv: int) -> GpuLayout:
    dp = -(-d // 4) * 4
    k_stride = dp if (dp // 4) % 2 else dp + 4
    cw = 4 if dv >= 32 else 2 if dv >= 16 else 1
    groups = -(-dv // (THREADS_X * cw))
    p_stride = bkv + (8 - bkv % 16) % 16
    return GpuLayout(dp, k_stride, cw, groups, groups * THREADS_X * cw, p_stride)


def shared_bytes(a: Attention, bq: int, bkv: int, elem: int = 4) -> int:
    """Static shared memory of the GPU kernel (`GpuLayout`): Q, K, V and P tiles of f32."""
    return 4 * gpu_layout(a.d, a.dv, bq, bkv).words(bq, bkv)


def attention_tiles(a: Attention) -> list[tuple[int, int]]:
    """GPU tiles that fit: bq a multiple of 16 (the thread rows), bkv of 8 (the thread columns)."""
    out = []
    for bq in (128, 64, 32, 16):
        for bkv in (64, 32, 16, 8):
            if shared_bytes(a, bq, bkv) <= SHARED_LIMIT and bq <= max(16, 2 * a.sq) and bkv <= max(8, 2 * a.sk):
                out.append((bq, bkv))
    return out


def attention_registers(a: Attention, bq: int, bkv: int) -> int:
    """Registers per thread: ~36 for the addressing, the ids and the row statistics, plus the
    accumulators (rq x the value columns), the scores and their operands (rq x ck, 2.5 each) and
    the query operands of a 4-wide step. Fitted to ptxas -v for sm_90 over 9 tiles at D = 32,
    64, 128 (56-116 registers, within 5 of each)."""
    rq, ck = bq // THREADS_Y, bkv // THREADS_X
    lay = gpu_layout(a.d, a.dv, bq, bkv)
    return int(36 + rq * lay.groups * lay.cw + 2.5 * rq * ck + 2 * rq)
