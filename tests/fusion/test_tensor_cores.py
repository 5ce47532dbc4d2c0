"""f16 contractions on tensor cores (issue 11): which kernels take mma.sync, what their PTX holds,
and their numbers on the simulator, both through the FMA path the simulator takes and through
the mma path itself, with the two intrinsics replaced by a warp-level emulation written from the
PTX ISA's fragment tables (so a fragment loaded from the wrong row or column is caught)."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.gemm import gemm_kernel, gemm_shape, mma_error
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

H200 = GPUS["h200"]
F16 = "chain t(a: f16[M, K], b: f16[K, N], c: f16[N]) -> f16[M, N] { return relu(a @ b + c) }"
# both operands transposed by copies the loader evaluates (no cp.async for them)
F16T = "chain t(a: f16[K, M], b: f16[N, K], c: f16[N]) -> f16[M, N] { return relu(transpose(a) @ transpose(b) + c) }"
F32 = "chain t(a: f32[M, K], b: f32[K, N], c: f32[N]) -> f32[M, N] { return relu(a @ b + c) }"
BF16 = F16.replace("f16", "bf16")
# batched: the copies' strength-reduced offsets start at the block's batch (emit/gemm.py: _flat_offsets)
F16B = "chain t(a: f16[B, M, K], b: f16[B, K, N], c: f16[N]) -> f16[B, M, N] { return relu(a @ b + c) }"


def _stages(src, binding, plan=None, hw=H200):
    c = fusec.check(src).chain("t")
    return compile_typed(c, binding, options=CompileOptions.make(target="gpu", hardware=hw,
                                                                  plans={"t": plan} if plan else {}))


def _plan(block, gemm, double_buffered=False, stages=0, ops=(1, 2)):
    g = {"ops": list(ops), "block_tiles": block, "gemm": gemm, "double_buffered": double_buffered}
    return {"groups": [dict(g, stages=stages) if stages else g]}


def test_f16_contractions_take_tensor_cores_and_f32_ones_do_not():
    big = {"M": 512, "K": 1024, "N": 4096}
    (g,) = _stages(F16, big).plan.kernels
    assert g.template == "contraction" and g.config.mma == "f16"
    st = _stages(F32, big)
    assert st.plan.kernels[0].template == "contraction" and st.plan.kernels[0].config.mma == ""
    text = _stages(F16, big).plan.format()
    assert "f16 tensor cores (mma.sync m16n8k16)" in text and "as tiled contraction, K = 1024 in steps of" in text and "on f16 tensor cores (mma.sync)" in text


@pytest.mark.parametrize("block,gemm,why", [
    ([16, 16], [8, 2, 2], "K step 8 is not a multiple of 16"),
    ([16, 12], [16, 2, 3], "not made of 2x2 fragment quads"),
    ([16, 24], [16, 2, 4], "not a grid of 16x16 warp tiles"),
])
def test_shapes_the_fragments_do_not_tile_stay_on_fmas(block, gemm, why):
    st = _stages(F16, {"M": 64, "K": 64, "N": 96}, _plan(block, gemm))
    (g,) = st.plan.kernels
    gk = gemm_kernel(st.plan.info, g.ops, g.root)
    assert g.config.mma == "" and why in mma_error(st.plan.info, gk, gemm_shape(st.plan.info, gk, g.root, g.block_tiles, g.config.steps))


def test_bf16_contractions_are_offered_64_column_warp_tiles_as_f16_ones_are():
    """The tile search's TN 16 (warp tiles of 32x64 or 16x64) for bf16 operands too: the bench
    mlp in bf16 takes one (the f16 one does; before, bf16 had TN 8 at most)."""
    for src in (F16, BF16):
        k = _stages(src, {"M": 512, "K": 1024, "N": 4096}).plan.kernels[0].config
        assert k.mma and k.tn == 16, (src, k.tm, k.tn)


def test_a_profile_without_tensor_cores_keeps_fmas():
    from dataclasses import replace
    st = _stages(F16, {"M": 512, "K": 1024, "N": 4096}, hw=replace(H200, tensor_flops_fp16=0.0))
    assert st.plan.kernels[0].template == "contraction" and st.plan.kernels[0].config.mma == ""
    (note,) = [d for d in st.plan.decisions if " as tiled contraction" in d]
    assert "on FMAs, not tensor cores: h200 has no tensor cores in its profile" in note   # --explain says why


@pytest.mark.parametrize("name", ["h200", "h100", "a100"])
def test_tensor_core_kernels_are_priced_at_mma_sync_not_wgmma(name):
    """Issue 37: a kernel on mma.sync is priced at mma.sync's ceiling (on Hopper half the wgmma
    peak the profile reports as `tensor_flops_fp16`), so a compute-bound f16 matmul is never
    predicted faster than its FLOPs at that ceiling. At the old price (989 TFLOP/s on Hopper)
    the 4096^3 matmul was predicted at 217 us, under the 278 us its 137 GFLOP take at 495."""
    from dataclasses import replace
    hw = GPUS[name]
    assert 0 < hw.mma_sync_flops() <= hw.tensor_flops_fp16
    if name != "a100":                  # Hopper: mma.sync is not the top instruction
        assert hw.mma_sync_flops() < 0.6 * hw.tensor_flops_fp16
    b = {"M": 4096, "K": 4096, "N": 4096}
    st = _stages(F16, b, hw=hw)
    (g,) = st.plan.kernels
    assert g.config.mma == "f16"
    flops = 2 * b["M"] * b["K"] * b["N"]
    (cost,) = st.plan.costs
    assert cost.time_s >= flops / hw.mma_sync_flops()
    # the ceiling is what prices it: on a profile whose mma.sync ran at the wgmma peak (the old
    # price) the search's plan is predicted below the flops at mma.sync's ceiling on Hopper
    fast = replace(hw, mma_sync_flops_fp16=hw.tensor_flops_fp16)
    (fast_cost,) = _stages(F16, b, hw=fast).plan.costs
    if name != "a100":
        assert fast_cost.time_s < flops / hw.mma_sync_flops() <= cost.time_s
    (note,) = [d for d in st.plan.decisions if " as tiled contraction" in d]   # --explain states the price
    assert f"priced at mma.sync's {hw.mma_sync_flops() / 1e12:.0f} TFLOP/s ceiling on {name}" in note
    assert ("(wgmma's 989 not used)" in note) == (name != "a100")


@pytest.mark.slow
def test_the_tensor_core_kernel_report():
    st = _stages(F16, {"M": 512, "K": 1024, "N": 4096})
    (r,) = report_kernels(st.emitted.source, st.emitted.entries["t"], H200, blocks=("middle",))
    g = st.plan.kernels[0]
    tm, tn = g.config.tm, g.config.tn
    assert r.mma and r.mma >= (tm // 2) * (tn // 2)       # one mma.sync per 16x8 fragment per K step of 16
    assert r.stack_frame_bytes == 0 and r.local_bytes == 0 and r.spill_store_bytes == 0
    assert r.blocks >= H200.units and r.blocks_per_sm * r.threads_per_block >= 8 * 32     # >= 8 warps an SM
    for site in r.coalescing.sites:                     # the epilogue's stores too: restaged through shared memory
        assert site.efficiency >= 0.9, (site.line, site.expr, site.efficiency)
    # fragments by ldmatrix from f16 tiles filled by cp.async, none by scalar shared loads
    hot = r.sass.hot_counts
    assert hot.shared_loads.get("LDSM.128") and not any(op.startswith("LDS.") for op in hot.shared_loads)
    assert hot.global_loads.get("LDGSTS.128") and g.config.stages
    hmma = hot.math                                     # the K loop's only math: its HMMAs
    # <= 3 instructions per HMMA (issue 37): the copies' source offsets strength-reduced (one
    # running offset per operand, no row stride multiplied in the loop), their shared addresses
    # 32-bit adds to a hoisted base (`_cp_async16hs`)
    assert hot.instructions <= 3 * hmma, (hot.instructions, hmma)
    copies = [line for line in st.emitted.source.split("def k0")[1].splitlines() if "_cp_async16" in line]
    assert copies and all("_cp_async16hs(" in line and "_f, (g" in line for line in copies), copies
    ldsm = [b for b in r.bank_conflicts if "_ldsm_x" in b.expr or "_cp_async16h" in b.expr]
    assert ldsm and all(b.ways == 1 for b in r.bank_conflicts), [b for b in r.bank_conflicts if b.ways != 1]
    copies = [b for b in r.bank_conflicts if b.expr.startswith("_cp_async16hs(")]
    assert copies and all(b.kind == "store" and b.array == "H" and b.ways == 1 for b in copies), copies


def test_bank_conflicts_of_ldmatrix_rows_and_16_byte_copies():
    """report/banks.py on the tensor-core form's accesses: an ldmatrix's 8 rows of a matrix are one
    phase, so 8 rows 128 bytes apart at the same column are 8-way, the swizzled ones 1-way; a
    16-byte copy per lane into consecutive chunks is 1-way."""
    from fusec.compiler.report.banks import bank_conflicts
    src = """
def k(a):
    S = cuda.shared.array(4096, numba.float32)
    H = S.view(np.float16)
    hb = _smem_base(H) if not _FMA_ONLY else 0
    lane = cuda.threadIdx.x % 32
    r = lane & 7
    j = lane >> 3
    plain = hb + 2 * (r * 64 + 8 * j)
    swz = hb + 2 * (r * 64 + ((j ^ r) << 3))
    x0, x1, x2, x3 = _ldsm_x4(plain)
    y0, y1, y2, y3 = _ldsm_x4_t(swz + 1024)
    _cp_async16h(H, (lane * 8,), a, (0, lane * 8))
    _cp_async16hs(H, (lane * 64,), hb + 128 * lane, a, (lane * 8,))
"""
    sites = {b.expr.split("(")[0]: b for b in bank_conflicts(src, "k", (32, 1, 1))}
    assert (sites["_ldsm_x4"].ways, sites["_ldsm_x4_t"].ways, sites["_cp_async16h"].ways) == (8, 1, 1)
    assert sites["_cp_async16hs"].ways == 8 and sites["_cp_async16hs"].kind == "store"     # 128 bytes apart
    assert sites["_ldsm_x4"].array == "H" and sites["_cp_async16h"].kind == "store"


CASES = [  # (source, binding, block tiles, [bk, tm, tn], double-buffered, cp.async stages): edges on
    # every side, K not a multiple of BK (a 16-byte copy's element-wise edge), a K loop
    # that prefetches its next step, rings of cp.async copies, and operands computed in the loader
    (F16, {"M": 37, "K": 41, "N": 27}, [16, 16], [16, 2, 2], False, 0),
    (F16, {"M": 40, "K": 20, "N": 33}, [32, 32], [16, 4, 4], False, 0),
    (F16, {"M": 20, "K": 64, "N": 17}, [16, 16], [32, 2, 2], True, 0),
    (F16, {"M": 40, "K": 56, "N": 33}, [32, 32], [16, 4, 4], False, 3),     # A copied (rows of 56), B not (33)
    (F16, {"M": 33, "K": 52, "N": 40}, [32, 32], [16, 4, 4], False, 2),     # B copied, A not
    (F16, {"M": 37, "K": 72, "N": 48}, [32, 48], [32, 4, 6], False, 2),
    (F16B, {"B": 3, "M": 40, "K": 48, "N": 40}, [1, 32, 32], [16, 4, 4], False, 2),     # both copied, batched
    (F16T, {"M": 37, "K": 41, "N": 27}, [32, 32], [16, 4, 4], False, 0),
    (F16T, {"M": 24, "K": 48, "N": 20}, [16, 16], [16, 2, 2], True, 0),
    # bf16: its uint16 arrays copied by cp.async as f16's are (partial tiles, a K tail)
    (BF16, {"M": 37, "K": 72, "N": 48}, [32, 48], [32, 4, 6], False, 2),
    (BF16, {"M": 40, "K": 56, "N": 33}, [32, 32], [16, 4, 4], False, 3),     # A copied (rows of 56), B not (33)
]


@pytest.mark.parametrize("src,binding,block,gemm,db,stages", CASES)
def test_tensor_core_kernels_on_the_simulator(src, binding, block, gemm, db, stages):
    plan = _plan(block, gemm, db, stages, (1, 2) if src in (F16, F16B, BF16) else range(5))
    st = _stages(src, binding, plan)
    assert st.plan.kernels[0].config.mma == ("bf16" if src == BF16 else "f16")
    assert ("_cp_async16h" in st.emitted.source) == bool(stages)
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {"t": plan}})
    (c,) = prog.t.check(binding=binding, seed=5)
    assert c.ok, c.describe()


def _decode(kind):
    """A 16-bit fragment element as f32: an f16 half, or bf16 bits (a uint16: the top half of
    the f32)."""
    if kind == "bf16":
        return lambda h: np.uint32(int(h) << 16).view(np.float32)
    return lambda h: np.float32(h)


def _emulated_f16(kind="f16"):
    """_pack_<kind>x2 and _mma_<kind> for the simulator: the block's threads post their fragments,
    meet at a barrier, and each lane takes its part of D = A B + C, the fragments read by the
    PTX ISA's tables for mma.m16n8k16 with .f16 (or .bf16) A (row) and B (col) and .f32 C/D."""
    decode = _decode(kind)

    def pack(lo, hi):
        return (np.float16(lo), np.float16(hi))

    def mma(c0, c1, c2, c3, a0, a1, a2, a3, b0, b1):
        me = threading.current_thread()
        box = me._manager.__dict__.setdefault("_fusec_mma", {})
        box[me.thread_id] = ((c0, c1, c2, c3), (a0, a1, a2, a3), (b0, b1))
        me.syncthreads()
        warp, lane = divmod(me.thread_id, 32)
        A, B, C = np.zeros((16, 16), np.float32), np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32)
        for l in range(32):
            cs, ar, br = box[warp * 32 + l]
            g, t = divmod(l, 4)
            for reg, (row, col) in zip(ar, ((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
                A[row, col], A[row, col + 1] = (decode(h) for h in reg)
            for reg, k in zip(br, (2 * t, 2 * t + 8)):
                B[k, g], B[k + 1, g] = (decode(h) for h in reg)
            for v, (row, col) in zip(cs, ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))):
                C[row, col] = v
        D = A @ B + C
        g, t = divmod(lane, 4)
        out = tuple(np.float32(D[r, c]) for r, c in ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)))
        me.syncthreads()                                # every lane has read the box before the next call
        return out

    return pack, mma


def _emulated_ldsm():
    """_smem_base, _ldsm_x4, _ldsm_x4_t, _ldsm_x2, _ldsm_x2_t for the simulator, from the PTX
    ISA's ldmatrix (m8n8, .b16): lanes 8 j .. 8 j + 7 give the shared addresses of rows 0..7 of
    matrix j (x4: lanes 0-31, x2: 0-15), each row 8 consecutive halves; lane l receives, of each
    matrix, row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1, or with .trans column l // 4, rows
    2 (l % 4) and 2 (l % 4) + 1 (a register: its two 16-bit elements, low first, as the tile
    holds them: f16 halves, or bf16 bits in a uint16 view). A shared address is the array's data
    address (`_smem_base`) plus bytes. Each row address must be 16-byte aligned, and the 8 rows
    of a matrix must fall in 8 distinct 16-byte positions of a 128-byte line (one wavefront: no
    bank conflict)."""
    arrays = {}

    def smem_base(arr):
        base = arr.__array_interface__["data"][0]
        arrays[base] = arr
        return base

    def element(addr):
        base = max(b for b in arrays if b <= addr)
        arr = arrays[base]
        assert (addr - base) % 2 == 0 and addr - base < arr.nbytes
        return arr[(addr - base) // 2]

    def make(n, trans):
        def ldsm(addr):
            me = threading.current_thread()
            box = me._manager.__dict__.setdefault("_fusec_ldsm", {})
            box[me.thread_id] = int(addr)
            me.syncthreads()
            warp, lane = divmod(me.thread_id, 32)
            rows = [box[warp * 32 + l] for l in range(8 * n)]
            base = max(b for b in arrays if b <= rows[0])
            for j in range(n):
                starts = [a - base for a in rows[8 * j:8 * j + 8]]
                assert all(a % 16 == 0 for a in starts), ("ldmatrix row address not 16-byte aligned", starts)
                assert len({(a // 16) % 8 for a in starts}) == 8, ("ldmatrix matrix with a bank conflict", starts)
            g, t = divmod(lane, 4)
            out = []
            for j in range(n):
                if trans:
                    a0, a1 = rows[8 * j + 2 * t], rows[8 * j + 2 * t + 1]
                    out.append((element(a0 + 2 * g), element(a1 + 2 * g)))
                else:
                    a = rows[8 * j + g]
                    out.append((element(a + 4 * t), element(a + 4 * t + 2)))
            me.syncthreads()                            # every lane has read the box before the next call
            return tuple(out)
        return ldsm

    return smem_base, make(4, False), make(4, True), make(2, False), make(2, True)


BF16_CASES = [  # bf16 operands: their bits in uint16 arrays and tiles, by cp.async where rows allow
    (BF16, {"M": 37, "K": 41, "N": 27}, [16, 16], [16, 2, 2], False, 0),
    (BF16, {"M": 40, "K": 56, "N": 33}, [32, 32], [16, 4, 4], False, 0),
    (BF16, {"M": 20, "K": 64, "N": 17}, [16, 16], [32, 2, 2], True, 0),
    (BF16, {"M": 37, "K": 72, "N": 48}, [32, 48], [32, 4, 6], False, 2),     # both copied, a K tail
    (BF16, {"M": 40, "K": 56, "N": 33}, [32, 32], [16, 4, 4], False, 3),     # A copied, B not
]


# the emulated warp runs each case once (CASES already holds two of BF16_CASES)
@pytest.mark.parametrize("src,binding,block,gemm,db,stages", CASES + [c for c in BF16_CASES if c not in CASES])
def test_the_mma_path_itself_under_an_emulated_warp(src, binding, block, gemm, db, stages):
    from numba import cuda
    kind = "bf16" if src == BF16 else "f16"
    st = _stages(src, binding, _plan(block, gemm, db, stages, range(5) if src == F16T else (1, 2)))
    if src == F16B:                          # both operands' copies strength-reduced
        assert st.emitted.source.count("_cp_async16hs(H") == 4 and "arg0_f = _flat(arg0, 5760)" in st.emitted.source
    assert st.plan.kernels[0].config.mma == kind
    assert st.plan.kernels[0].config.prefetch == db and st.plan.kernels[0].config.stages == stages
    assert ("_cp_async16h(" in st.emitted.source) == bool(stages)
    sim_branch = f"    _FMA_ONLY = True\n    _pack_{kind}x2 = _mma_{kind} = None\n"
    assert sim_branch in st.emitted.source and f"_mma_{kind}(" in st.emitted.source
    ldsm_branch = "    _ldsm_x4 = _ldsm_x4_t = _ldsm_x2 = _ldsm_x2_t = _smem_base = None\n"
    assert ldsm_branch in st.emitted.source and "_ldsm_x4" in st.emitted.source.split("def k0")[1]
    source = st.emitted.source.replace(sim_branch, f"    _FMA_ONLY = False\n    _pack_{kind}x2, _mma_{kind} = _EMULATED\n")
    source = source.replace(ldsm_branch, "    _smem_base, _ldsm_x4, _ldsm_x4_t, _ldsm_x2, _ldsm_x2_t = _EMULATED_LDSM\n")
    ns = {"_EMULATED": _emulated_f16(kind), "_EMULATED_LDSM": _emulated_ldsm()}
    exec(compile(source, "<tensor-core kernels>", "exec"), ns)
    rng = np.random.default_rng(7)
    M, K, N = binding["M"], binding["K"], binding["N"]
    batch = (binding["B"],) if "B" in binding else ()
    dt = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    a = rng.uniform(-2, 2, batch + (M, K)).astype(dt)
    b = rng.uniform(-2, 2, batch + (K, N)).astype(dt)
    c = rng.uniform(-2, 2, N).astype(dt)
    if kind == "bf16":      # a wide range: an f16 tile would lose these (f16's largest is 65504)
        a[0, :] *= 2.0 ** 20
        b[:, 0] *= 2.0 ** -30
    args = (a, b) if src != F16T else (np.ascontiguousarray(a.T), np.ascontiguousarray(b.T))
    (out,) = ns["run_t"](*(cuda.to_device(x) for x in args), cuda.to_device(c))
    got = np.asarray(out.copy_to_host()).astype(np.float32)
    mm = (a.astype(np.float32) @ b.astype(np.float32)).astype(dt).astype(np.float32)
    want = np.maximum((mm + c.astype(np.float32)).astype(dt).astype(np.float32), 0)
    tol = 2e-2 if kind == "bf16" else 2e-3       # bf16 rounds to 8 bits, f16 to 11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


def test_cp_async_copies_only_operands_whose_rows_are_16_byte_multiples():
    """B [K, 36]: rows 72 bytes apart, a run of 8 halves is not 16-byte aligned in every row:
    loaded a half at a time; A [M, 64] copied by 16-byte cp.async, its array aligned at launch."""
    st = _stages(F16, {"M": 64, "K": 64, "N": 36}, _plan([32, 32], [16, 4, 4], stages=2))
    src = st.emitted.source.split("def k0")[1]
    copies = [line for line in src.splitlines() if "_cp_async16hs(H" in line]
    assert copies and all("arg0_f" in line and "arg1" not in line for line in copies)
    assert "arg0 = _align16(arg0)" in src and "_align16(arg1)" not in src
