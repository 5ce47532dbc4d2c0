"""The kernel report's SASS reading (compiler/report/sass.py) and its bank conflicts
(compiler/report/banks.py): hand-written SASS, PTX and kernels with known answers, then the
bench mlp kernel through ptxas and cuobjdump."""
from __future__ import annotations

import os

import numpy as np
import pytest

from fusec.compiler.report import sass
from fusec.compiler.report.banks import bank_conflicts, ways

# An outer loop (0x0010-0x0130) holding an inner loop (0x0050-0x00d0), then a straight stretch
# whose two loads are consumed only after both are issued, a barrier, and a stretch whose loads
# wait one by one; ptxas's trap loop after EXIT.
SNIPPET = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E R8, desc[UR4][R2.64+0x10] ;
        /*0030*/                   STS.128 [R0], R4 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   LDS.128 R12, [R0+0x10] ;
        /*0060*/                   LDS R16, [R0+0x20] ;
        /*0070*/                   FFMA R20, R12, R16, R20 ;
        /*0080*/                   FFMA R21, R13, R16, R21 ;
        /*0090*/                   HFMA2.MMA R22, -RZ, RZ, 0, 0 ;
        /*00a0*/                   FMUL R23, R14, R15 ;
        /*00b0*/                   IADD3 R0, R0, 0x4, RZ ;
        /*00c0*/                   ISETP.NE.AND P0, PT, R0, R9, PT ;
        /*00d0*/               @P0 BRA 0x50 ;
        /*00e0*/                   NOP ;
        /*00f0*/                   IADD3 R2, P1, R2, 0x40, RZ ;
        /*0100*/                   ISETP.NE.AND P2, PT, R2, R10, PT ;
        /*0110*/                   FADD R24, R8, R24 ;
        /*0120*/                   MUFU.EX2 R25, R24 ;
        /*0130*/               @P2 BRA 0x10 ;
        /*0140*/                   LDG.E.64 R30, desc[UR4][R2.64] ;
        /*0150*/                   LDG.E R32, desc[UR4][R2.64+0x8] ;
        /*0160*/                   IMAD.MOV.U32 R40, RZ, RZ, R3 ;
        /*0170*/                   FADD R33, R31, R32 ;
        /*0180*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0190*/                   LDG.E R34, desc[UR4][R2.64] ;
        /*01a0*/                   STG.E [R2.64], R34 ;
        /*01b0*/                   LDG.E R35, desc[UR4][R2.64+0x4] ;
        /*01c0*/                   STG.E [R2.64+0x4], R35 ;
        /*01d0*/                   EXIT ;
        /*01e0*/                   BRA 0x1e0;
"""


def test_parse_reads_predicates_opcodes_operands_and_targets():
    code = sass.parse_sass(SNIPPET)
    assert len(code) == 31 and code[0].address == 0 and code[-1].address == 0x1e0
    bra = code[13]
    assert (bra.predicate, bra.opcode, bra.target) == ("P0", "BRA", 0x50)
    assert code[1].opcode == "LDG.E.128" and code[1].operands == ("R4", "desc[UR4][R2.64]")
    assert sass.memory_access(code[1]) == ("global", "load", 128) and sass.memory_access(code[5]) == ("shared", "load", 128)
    assert sass.memory_access(code[6]) == ("shared", "load", 32) and sass.memory_access(code[3]) == ("shared", "store", 128)
    assert sass.memory_access(code[7]) is None and sass.label(code[2]) == "LDG.32"


def test_nvdisasm_labels_resolve_to_the_same_loops():
    labelled = SNIPPET.replace("@P0 BRA 0x50 ;", "@P0 BRA `(.L_x_1) ;").replace("@P2 BRA 0x10 ;", "@P2 BRA `(.L_x_0) ;")
    labelled = labelled.replace("        /*0010*/", ".L_x_0:\n        /*0010*/").replace("        /*0050*/",
                                                                                     ".L_x_1:\n        /*0050*/")
    assert [i.target for i in sass.parse_sass(labelled)] == [i.target for i in sass.parse_sass(SNIPPET)]


def test_loops_nesting_math_share_widths_and_loads_in_flight():
    s = sass.summarise(sass.parse_sass(SNIPPET), "", "sm_90")
    (loop,) = s.loops                              # only the inner loop is innermost
    assert (loop.start, loop.end, loop.depth) == (0x50, 0xd0, 2) and s.hot == 0
    c = loop.counts
    # 9 issued: 2 LDS, 2 FFMA, HFMA2.MMA of constants (not math), FMUL, IADD3, ISETP, BRA
    assert (c.instructions, c.math) == (9, 3) and c.math_share == pytest.approx(3 / 9)
    assert c.shared_loads == {"LDS.128": 1, "LDS.32": 1} and c.global_loads == {}
    assert loop.loads_in_flight == 0
    # the outer loop's own code is a phase: the 128-bit load (R4-R7) is consumed by the STS at once,
    # after the second load was issued: 2 in flight
    assert [(p.where, p.global_loads, p.loads_in_flight) for p in s.phases] == [
        ("code 0x10-0x30", 2, 2), ("code 0x140-0x170", 2, 2), ("code 0x190-0x1d0", 2, 1)]
    assert s.loads_in_flight_min == 1
    assert s.kernel.instructions == 29 and s.kernel.global_loads == {"LDG.128": 1, "LDG.32": 4, "LDG.64": 1}
    assert s.kernel.math == 6 and s.kernel.barriers == 2


def test_a_kernel_without_loops_reports_the_whole_kernel():
    code = [i for i in sass.parse_sass(SNIPPET) if i.address >= 0x140]
    s = sass.summarise(code, "", "sm_90")
    assert s.loops == () and s.hot is None and s.hot_counts is s.kernel
    assert s.hot_counts.instructions == 10 and s.hot_counts.math == 1      # the trap after EXIT left out


def test_loads_in_flight_wait_on_a_register_read_or_rewritten():
    body = sass.parse_sass("""
        /*0000*/  LDG.E R4, desc[UR4][R2.64] ;
        /*0010*/  LDG.E R5, desc[UR4][R2.64+0x4] ;
        /*0020*/  LDG.E R6, desc[UR4][R2.64+0x8] ;
        /*0030*/  MOV R6, RZ ;
        /*0040*/  LDG.E.64 R8, desc[UR4][R2.64+0x10] ;
        /*0050*/  IMAD.WIDE R12, R8, 0x4, R12 ;
    """)
    assert sass.loads_in_flight(body) == 3                  # MOV rewrites R6: waits for the three
    assert sass.loads_in_flight(body[4:]) == 1


PTX = """
$L__BB0_1:
\tsetp.lt.s64 \t%p1, %rd5, 0;
\tadd.s64 \t%rd6, %rd5, 32;
\tselp.b64 \t%rd7, %rd6, %rd5, %p1;
\tmul.lo.s64 \t%rd8, %rd7, 65;
$L__BB0_2:
\tsetp.lt.s64 \t%p2, %rd9, -4;
\tselp.b64 \t%rd10, 65, 0, %p2;
\tsetp.ge.f32 \t%p3, %f1, %f2;
\tselp.f32 \t%f3, %f1, %f2, %p3;
\tsetp.ne.s64 \t%p4, %rd9, 0;
\tselp.b64 \t%rd11, 1, 0, %p4;
\tmad.lo.s64 \t%rd12, %rd10, 4, %rd11;
\t@%p4 bra \t$L__BB0_2;
\tbra.uni \t$L__BB0_3;
$L__BB0_3:
\t@%p1 bra \t$L__BB0_1;
\tselp.b64 \t%rd13, %rd6, %rd5, %p1;
\tret;
"""


def test_ptx_counts_signed_index_selects_and_64bit_multiplies_by_loop():
    p = sass.ptx_counts(PTX)
    assert (p.loops, p.innermost_loops) == (2, 1)
    assert (p.wraparound_selects, p.wraparound_selects_innermost) == (3, 1)
    assert (p.mul64, p.mul64_innermost) == (2, 1)


# ---------------------------------------------------------------------------- bank conflicts

ATTENTION_PS = '''
from numba import cuda
import numba

@cuda.jit("void(float32[:, ::1])")
def k0(out):
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    Ps = cuda.shared.array((32, STRIDE), numba.float32)
    for c in range(4):
        Ps[ty, tx + 8 * c] = out[ty, tx]
    cuda.syncthreads()
    v = out[0, 0]
    w = Ps[tx, ty]
    z = Ps[ty, v]
'''


@pytest.mark.parametrize("stride, want", [(33, 4), (32, 4), (40, 1)])
def test_bank_conflicts_of_a_row_of_p_per_thread_row(stride, want):
    # block (8, 16): warp 0 is tx 0..7 by ty 0..3. Word ty*stride + tx: stride 33 and 32 put the 4
    # rows' words on the same banks 4 ways (33: bank ty+tx, each of banks 3..7 4 times; 32: bank tx),
    # stride 40 shifts each row by 8 banks: 32 distinct banks
    sites = bank_conflicts(ATTENTION_PS.replace("STRIDE", str(stride)), "k0", (8, 16, 1))
    store, read, data = sites
    assert (store.expr, store.kind, store.ways) == ("Ps[ty, tx + 8 * c]", "store", want)
    # Ps[tx, ty]: 8 rows tx, 4 columns ty; word tx*stride + ty: bank (tx*stride + ty) % 32
    words = [tx * stride + ty for ty in range(4) for tx in range(8)]
    by_bank = {}
    for w in words:
        by_bank.setdefault(w % 32, set()).add(w)
    assert read.ways == max(len(v) for v in by_bank.values())
    assert data.ways is None and "out[0, 0]" in data.why


def test_ways_counts_words_not_lanes_and_splits_wide_accesses():
    assert ways(np.zeros(32, dtype=np.int64), 4) == 1                      # a broadcast
    assert ways(np.arange(32) * 4 * 32, 4) == 32                           # one column of a [*, 32]
    assert ways(np.arange(32) * 8, 8) == 1                                 # f64 contiguous: 2 phases of 16 lanes
    assert ways(np.arange(32) * 16, 16) == 1                               # 16 bytes per lane: 4 phases of 8
    assert ways(np.arange(32) * 32, 16) == 2                               # stride 32 bytes: 8 lanes over 64 words


# ---------------------------------------------------------------------------- end to end

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def mlp_report():
    import fusec
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.report import report_kernels
    if sass.tool_path("cuobjdump") is None and sass.tool_path("nvdisasm") is None:
        pytest.skip("needs the dev extra's nvidia-cuda-cuobjdump or nvidia-cuda-nvdisasm")
    c = fusec.check(os.path.join(ROOT, "bench/fdsl/mlp.fdsl")).chain("mlp")
    st = compile_typed(c, {"M": 256, "K": 512, "N": 1024}, options=CompileOptions(target="gpu", hardware=GPUS["h200"]))
    return report_kernels(st.emitted.source, st.emitted.entries["mlp"], GPUS["h200"], trace=False)


def test_the_mlp_kernel_has_a_hot_loop_of_ffma_over_shared_loads(mlp_report):
    (r,) = mlp_report
    assert "sass" not in dict(r.unmeasured), r.unmeasured
    s = r.sass
    hot = s.loops[s.hot].counts
    assert hot.math > 0 and sum(hot.shared_loads.values()) > 0 and hot.instructions > hot.math
    # the K loop (the emitter writes each K step's kk loop out: one PTX loop)
    assert s.kernel.global_loads and s.kernel.global_stores and s.ptx.loops >= 1
    assert r.bank_conflicts and all(b.ways is not None for b in r.bank_conflicts)
    assert {b.array for b in r.bank_conflicts} == {"Ms", "Ns"}


def test_without_cuobjdump_and_nvdisasm_the_sass_is_unmeasured_with_the_reason(monkeypatch):
    from fusec.compiler.emitted import Launch
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.report import kernels
    from fusec.compiler.report.child import MeasureError
    monkeypatch.setattr(sass, "tool_path", lambda name: None)
    with pytest.raises(MeasureError, match="no cuobjdump; no nvdisasm"):
        sass.disassemble(b"")
    monkeypatch.setattr(kernels.ptxmod, "assemble", lambda ptx, arch: ("resources", b"cubin"))
    res, why = kernels._resources({"ptx": {"k0": "ptx"}, "errors": {}}, "k0", GPUS["h200"])
    assert res == "resources" and why.startswith("no SASS: no cuobjdump; no nvdisasm")
    r = kernels._report(Launch("k0", "launch", 0, ("64",), ("128",)), "no ptxas", "not traced", GPUS["h200"], why, ())
    assert r.sass is None and r.bank_conflicts == () and dict(r.unmeasured)["sass"] == why


RUNS = '''
from numba import cuda
import numba

@cuda.jit("void(float32[:, ::1])")
def k0(out):
    tx = cuda.threadIdx.x
    Ns = cuda.shared.array((2, 520), numba.float32)
    b0 = Ns[0, tx * STRIDE + OFFSET]
    b1 = Ns[0, tx * STRIDE + OFFSET + 1]
    b2 = Ns[0, tx * STRIDE + OFFSET + 2]
    b3 = Ns[0, tx * STRIDE + OFFSET + 3]
    c = Ns[1, tx]
'''


@pytest.mark.parametrize("stride, offset, widths, want", [
    (4, 0, [16] * 4, [1] * 4),        # 8 lanes x 16 bytes a phase: 32 consecutive words
    (8, 0, [16] * 4, [2] * 4),        # each phase over 64 words: banks 0, 8, 16, 24 twice each
    # not 16-byte aligned: a scalar read (words 4 tx + 1: 8 banks, 4 words each), an 8-byte pair
    # (16 lanes a phase: words 4 tx + 2, + 3 over 64 words, 2 each), a scalar read
    (4, 1, [4, 8, 8, 4], [4, 2, 2, 4]),
    (4, 2, [8] * 4, [2] * 4),         # 8-byte aligned: two 8-byte reads
])
def test_a_run_of_consecutive_reads_is_one_wide_access(stride, offset, widths, want):
    # the contraction template's register runs (Ns[kk, tx4] .. Ns[kk, tx4 + 3]) are one LDS.128 in
    # the SASS: the report prices them as the wide access, in phases of 8 lanes (16 lanes for 8 bytes)
    src = RUNS.replace("STRIDE", str(stride)).replace("OFFSET", str(offset))
    sites = bank_conflicts(src, "k0", (32, 1, 1))
    run, last = sites[:4], sites[4]
    assert [s.width for s in run] == widths
    assert [s.ways for s in run] == want
    assert (last.width, last.ways) == (4, 1)      # Ns[1, tx] alone: a scalar read, 32 banks


def test_instructions_under_the_never_true_predicate_are_not_counted():
    """ptxas pads cp.async's LDGSTS and DEPBAR with `@!PT LDS RZ, [RZ]`: never executed, so neither
    an instruction issued nor a shared load of the loop."""
    code = sass.parse_sass("""
        /*0000*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64] ;
        /*0010*/              @!PT LDS RZ, [RZ] ;
        /*0020*/                   LDS.128 R8, [R2] ;
        /*0030*/                   FFMA R20, R8, R9, R20 ;
    """)
    c = sass.counts(code)
    assert c.instructions == 3 and c.shared_loads == {"LDS.128": 1} and c.global_loads == {"LDGSTS.128": 1}
