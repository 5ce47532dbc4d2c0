"""The SASS census of the GPU bench kernels (issue 36's done-when figures), from the kernel report
without a GPU and without running a kernel: each workload compiled for the H200, every kernel's
PTX assembled by ptxas for sm_90 and disassembled (compiler/report/sass.py), its shared accesses'
bank conflicts computed from the emitted Python (banks.py).

    python -m bench.sass_census [--only mlp,matmul4096] [--out bench/results]

Per kernel: the hot innermost loop's instructions per iteration and math share (the whole
kernel's when it has no loop), its shared and global loads by width, wraparound selects in the
innermost PTX loops and in all, 64-bit multiplies, the fewest global loads in flight per thread
over its phases, registers, local memory and spills, and the worst bank-conflict ways. Then the
done-when checks: math share >= 70% (mlp, matmul4096), >= 60% (conv), >= 50% (attention);
the f16 tensor-core contractions (matmul4096_f16, mlp_f16, bmm_f16, bmm_bcast_f16, conv_f16;
issue 37): LDSM and LDGSTS in the K loop, no scalar shared loads there, <= 3 instructions per
HMMA, every shared access 1-way; the same for bf16 (matmul4096_bf16, mlp_bf16, conv_bf16:
16-bit global arrays, issue 37 item 5); f16 attention on tensor cores (attention_f16 at D = 64
and 128, a causal one, and attention_bf16; issue 37 items 3, 4, 5): one kernel on f16 (bf16)
tensor cores, the key loop's HMMAs those of
both products, fragments by LDSM, no scalar shared loads and no shared stores there (P stays in
registers), 16-byte cp.async for K and V, every shared access 1-way, and for the causal case the
emitted key loop bounded at the block's last query;
operand loads of those loops LDS.128 or wider; 0 wraparound selects in innermost loops; >= 4
loads in flight in every phase of the row kernels (softmax, layernorm) and 16-byte global loads
and stores (their blocked-cyclic layout, plan/rows.py: row_layout); 16-byte global loads in the
elementwise kernels (ew_chain, bias_gelu_res).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MATMUL = "chain mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }"
MATMUL16 = "chain mm(a: f16[M, K], b: f16[K, N]) -> f16[M, N] { return a @ b }"
MLP16 = "chain mlp(x: f16[M, K], w: f16[K, N], b: f16[N]) -> f16[M, N] { return gelu(x @ w + b) }"
CONV16 = ("chain conv16(x: f16[B, C, 56, 56], w: f16[F, C, 3, 3]) -> f16[B, F, 56, 56] "
          "{ return relu(conv2d(x, w, padding=1)) }")
BMM16 = "chain bmm(a: f16[B, M, K], b: f16[B, K, N]) -> f16[B, M, N] { return a @ b }"
BMMW16 = "chain bmmw(a: f16[B, M, K], w: f16[K, N]) -> f16[B, M, N] { return a @ w }"
ATTN16 = ("chain attention(q: f16[B, S, D], k: f16[B, S, D], v: f16[B, S, D]) -> f16[B, S, D] "
          "{ return softmax(q @ transpose(k) * 0.125, axis=-1) @ v }")
CAUSAL16 = ("chain attention(q: f16[B, S, D], k: f16[B, S, D], v: f16[B, S, D]) -> f16[B, S, D] {\n"
            "    z = where(reshape(arange(S), [S, 1]) >= arange(S), q @ transpose(k) * 0.125, -inf)\n"
            "    return softmax(z, axis=-1) @ v\n}")
# the channels-last conv's instructions per HMMA (conv_f16 and conv_bf16 alike)
CONV16_PER_HMMA = 3.0
# (name, .fdsl file or source, chain, binding, kind: what the done-when asks of it)
CASES = (
    ("mlp", "bench/fdsl/mlp.fdsl", "mlp", dict(M=512, K=1024, N=4096), ("contraction", 0.70)),
    ("matmul4096", MATMUL, "mm", dict(M=4096, K=4096, N=4096), ("contraction", 0.70)),
    # issue 37's <= ~3 per HMMA: the cp.async copies' source offsets strength-reduced (a running
    # offset per operand, no run-time row stride in the K loop) and their shared addresses 32-bit
    # (emit/gemm.py: _flat_offsets); matmul4096_f16 reaches 2.2, mlp_f16 2.75
    ("matmul4096_f16", MATMUL16, "mm", dict(M=4096, K=4096, N=4096), ("mma", 3.0)),
    ("mlp_f16", MLP16, "mlp", dict(M=512, K=1024, N=4096), ("mma", 3.0)),
    ("bmm_f16", BMM16, "bmm", dict(B=16, M=512, K=512, N=512), ("mma", 3.0)),
    ("bmm_bcast_f16", BMMW16, "bmmw", dict(B=16, M=512, K=512, N=512), ("mma", 3.0)),
    # the channels-last implicit GEMM (its two layout copies are kernels of their own, no HMMA):
    # its K steps' (kh, kw, c0) stepped, not split, each copy a running offset and a 32-bit
    # shared address, the 2-stage ring unrolled (emit/conv.py: KStepper, emit/gemm.py:
    # _conv_pairs): 2.8 per HMMA
    ("conv_f16", CONV16, "conv16", dict(B=16, C=128, F=128), ("mma", CONV16_PER_HMMA)),
    # bf16: its global arrays hold the 16 bits (emit/values.py), copied by cp.async as f16's are
    ("matmul4096_bf16", MATMUL16.replace("f16", "bf16"), "mm", dict(M=4096, K=4096, N=4096), ("mma", 3.0)),
    ("mlp_bf16", MLP16.replace("f16", "bf16"), "mlp", dict(M=512, K=1024, N=4096), ("mma", 3.0)),
    ("conv_bf16", CONV16.replace("f16", "bf16"), "conv16", dict(B=16, C=128, F=128), ("mma", CONV16_PER_HMMA)),
    ("conv_bn_relu", "bench/fdsl/conv_bn_relu.fdsl", "conv_bn_relu", dict(B=8, C=64, F=64), ("contraction", 0.60)),
    ("attention", "bench/fdsl/attention.fdsl", "attention", dict(B=8, S=1024, D=64), ("contraction", 0.50)),
    # issue 37 items 3, 4: f16 attention on tensor cores (FlashAttention-2's structure), and causal
    ("attention_f16", ATTN16, "attention", dict(B=16, S=2048, D=64), ("attention_mma", None)),
    ("attention_f16_d128", ATTN16, "attention", dict(B=16, S=2048, D=128), ("attention_mma", None)),
    ("attention_f16_causal", CAUSAL16, "attention", dict(B=16, S=2048, D=64), ("attention_mma", "causal")),
    ("attention_bf16", ATTN16.replace("f16", "bf16"), "attention", dict(B=16, S=2048, D=64), ("attention_mma", None)),
    ("softmax", "bench/fdsl/softmax.fdsl", "softmax", dict(M=8192, N=1024), ("row", None)),
    ("layernorm", "bench/fdsl/layernorm.fdsl", "layernorm", dict(M=8192, N=1024), ("row", None)),
    ("layernorm768", "bench/fdsl/layernorm.fdsl", "layernorm", dict(M=16384, N=768), ("row", None)),
    ("ew_chain", "bench/fdsl/ew_chain.fdsl", "ew_chain", dict(M=4096, N=4096), ("elementwise", None)),
    ("bias_gelu_res", "bench/fdsl/bias_gelu_res.fdsl", "bias_gelu_res", dict(M=8192, N=3072), ("elementwise", None)),
)


def kernels_of(src: str, chain: str, binding: dict) -> tuple[list, dict]:
    """The kernel reports of a chain's fused build for the H200, untraced (nothing runs), and the
    plan's predicted time: the model's alone, and priced again with what the report measured."""
    import fusec
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.cost import total_time
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.plan.planner import with_measured
    from fusec.compiler.report import report_kernels
    path = os.path.join(ROOT, src) if src.endswith(".fdsl") else src
    hw = GPUS["h200"]
    st = compile_typed(fusec.check(path).chain(chain), binding, options=CompileOptions(target="gpu", hardware=hw))
    reports = report_kernels(st.emitted.source, st.emitted.entries[chain], hw, trace=False)
    LAST["stages"] = st          # the attention checks read its plan's tiles and emitted loop bound
    measured = {r.group: m for r in reports if r.kind == "launch" and (m := r.measured()) is not None}
    predicted = {"model_s": total_time(st.plan.costs),
                 "measured_s": total_time(with_measured(st.plan, hw, measured).costs)}
    return reports, predicted


LAST: dict = {}


def attention_step(st) -> dict:
    """HMMAs per key step of the plan's tensor-core attention kernel, by product, and whether its
    emitted key loop is bounded by the diagonal (the causal skip: emit/attention_mma.py)."""
    from fusec.compiler.plan.attention import attention_kernel
    (g,) = [g for g in st.plan.kernels if g.template == "attention"]
    a = attention_kernel(st.plan.info, g.ops)
    bkv = g.config.block_kv
    return {"qk": (a.d // 16) * (bkv // 8), "pv": (bkv // 16) * (a.dv // 8), "mma": g.config.mma,
            "causal_bound": "# causal: the tiles above the diagonal skipped" in st.emitted.source}


def row(r) -> dict:
    """One kernel's census entry (plain data)."""
    s = r.sass
    out = {"kernel": r.kernel, "grid": r.grid, "block": r.block, "registers": r.registers,
           "local_bytes": None if r.stack_frame_bytes is None else r.stack_frame_bytes + (r.local_bytes or 0),
           "spill_bytes": None if r.spill_store_bytes is None else r.spill_store_bytes + r.spill_load_bytes,
           "bank_ways": max((b.ways for b in r.bank_conflicts or () if b.ways is not None), default=None),
           "unmeasured": dict(r.unmeasured)}
    if s is None:
        return out
    h = s.hot_counts
    out.update(loop=None if s.hot is None else f"{s.loops[s.hot].start:#x}-{s.loops[s.hot].end:#x}",
               innermost_loops=len(s.loops), instructions_per_iteration=h.instructions, math=h.math,
               math_share=h.math_share, shared_loads=h.shared_loads, global_loads=h.global_loads,
               hmma=h.hmma, shared_stores=h.shared_stores,
               kernel_global_loads=s.kernel.global_loads, kernel_global_stores=s.kernel.global_stores,
               wraparound_selects_innermost=s.ptx.wraparound_selects_innermost,
               wraparound_selects=s.ptx.wraparound_selects, mul64_innermost=s.ptx.mul64_innermost,
               mul64=s.ptx.mul64, loads_in_flight_min=s.loads_in_flight_min,
               phases=[[p.where, p.global_loads, p.loads_in_flight] for p in s.phases])
    return out


def checks(kind: tuple, rows: list[dict]) -> list[tuple[str, bool]]:
    """The done-when items of one workload: (what, met)."""
    what, share = kind
    out = []
    for k in rows:
        if "math_share" not in k:
            out.append((f"{k['kernel']}: SASS measured", False))
            continue
        out.append((f"{k['kernel']}: 0 wraparound selects in innermost loops", k["wraparound_selects_innermost"] == 0))
        out.append((f"{k['kernel']}: 0 local memory and spills", k["local_bytes"] == 0 and k["spill_bytes"] == 0))
        if what == "contraction" and k["shared_loads"] and k["math"]:
            out.append((f"{k['kernel']}: math share {100 * (k['math_share'] or 0):.1f}% >= {100 * share:.0f}%",
                        (k["math_share"] or 0) >= share))
            narrow = {op: n for op, n in k["shared_loads"].items() if int(op.rsplit(".", 1)[1]) < 128}
            out.append((f"{k['kernel']}: operand loads LDS.128 or wider (narrower: {narrow or 'none'})", not narrow))
        if what == "row" and k["phases"]:
            out.append((f"{k['kernel']}: >= 4 loads in flight in every phase (fewest {k['loads_in_flight_min']})",
                        (k["loads_in_flight_min"] or 0) >= 4))
        ldsm = lambda r: "LDSM.128" in (r.get("shared_loads") or {})
        if what == "mma" and not ldsm(k) and any(ldsm(o) for o in rows):
            continue                 # a conv's layout copy beside its tensor-core kernel
        if what == "mma":            # issue 37: the 16-bit (f16, bf16) tensor-core contraction's K loop
            hmma, loads = k["math"] or 0, k["shared_loads"] or {}
            per = k["instructions_per_iteration"] / hmma if hmma else None
            out.append((f"{k['kernel']}: fragments by ldmatrix, no scalar shared loads ({loads})",
                        "LDSM.128" in loads and not any(op.startswith("LDS.") for op in loads)))
            out.append((f"{k['kernel']}: 16-byte cp.async into shared memory ({k['global_loads']})",
                         "LDGSTS.128" in (k["global_loads"] or {})))
            out.append((f"{k['kernel']}: {per or 0:.1f} instructions per HMMA <= {share}", per is not None and per <= share))
            out.append((f"{k['kernel']}: bank ways {k['bank_ways']} (1: conflict-free)", k["bank_ways"] == 1))
        if what == "attention_mma":   # issue 37 items 3, 4: FlashAttention-2's structure on mma.sync
            step = attention_step(LAST["stages"])
            out.append((f"{k['kernel']}: on {step['mma'] or 'no'} tensor cores", step["mma"] in ("f16", "bf16")))
            out.append((f"{k['kernel']}: HMMA in both products ({k['hmma']} in the key loop, Q·Kᵀ "
                        f"{step.get('qk')} + P·V {step.get('pv')})",
                        bool(step) and k["hmma"] == step["qk"] + step["pv"]))
            loads = k["shared_loads"] or {}
            out.append((f"{k['kernel']}: fragments by ldmatrix, no scalar shared loads (P stays in registers: "
                        f"{loads}, shared stores {k['shared_stores']})",
                        "LDSM.128" in loads and not any(op.startswith("LDS.") for op in loads)
                        and not k["shared_stores"]))
            out.append((f"{k['kernel']}: 16-byte cp.async for K and V ({k['global_loads']})",
                        "LDGSTS.128" in (k["global_loads"] or {})))
            out.append((f"{k['kernel']}: bank ways {k['bank_ways']} (1: conflict-free)", k["bank_ways"] == 1))
            if share == "causal":
                out.append((f"{k['kernel']}: the key loop's bound skips the tiles above the diagonal",
                            step["causal_bound"]))
        if what in ("row", "elementwise") and k["kernel_global_loads"]:
            out.append(_wide(k, "loads", k["kernel_global_loads"]))
        if what == "row" and k["kernel_global_stores"]:      # the output phase's runs (row kernels' blocked-cyclic layout)
            out.append(_wide(k, "stores", k["kernel_global_stores"]))
    return out


def _wide(k: dict, what: str, accesses: dict) -> tuple[str, bool]:
    """16-byte global accesses: each has its scalar fallback (an address not 16-byte aligned: 4
    accesses of 4 bytes, a run-time branch, emit/vector.py); beyond those every one must be wide."""
    wide = sum(n for op, n in accesses.items() if int(op.rsplit(".", 1)[1]) >= 128)
    narrow = sum(n for op, n in accesses.items() if int(op.rsplit(".", 1)[1]) < 128)
    return (f"{k['kernel']}: 16-byte global {what} ({wide} wide, {narrow} narrow, of which "
            f"{min(narrow, 4 * wide)} the unaligned fallback)", wide > 0 and narrow <= 4 * wide)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    only = {x for x in args.only.split(",") if x}
    census, failed = [], 0
    for name, src, chain, binding, kind in CASES:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        reports, predicted = kernels_of(src, chain, binding)
        rows = [row(r) for r in reports]
        met = checks(kind, rows)
        failed += sum(1 for _, ok in met if not ok)
        census.append({"workload": name, "binding": binding, "predicted_h200": predicted, "kernels": rows,
                       "checks": [{"what": w, "met": ok} for w, ok in met]})
        print(f"{name} {binding} ({time.perf_counter() - t0:.1f} s): predicted on h200 "
              f"{1e6 * predicted['model_s']:.1f} us (model), {1e6 * predicted['measured_s']:.1f} us (with the report)")
        for k in rows:
            print(f"  {k['kernel']}: regs {k['registers']}, loop {k.get('loop')} {k.get('instructions_per_iteration')} "
                  f"instructions, math {_pct(k.get('math_share'))}, shared loads {k.get('shared_loads')}, "
                  f"global loads {k.get('global_loads')} (kernel {k.get('kernel_global_loads')}), wraparound selects "
                  f"{k.get('wraparound_selects_innermost')}/{k.get('wraparound_selects')}, 64-bit multiplies "
                  f"{k.get('mul64_innermost')}/{k.get('mul64')}, loads in flight min {k.get('loads_in_flight_min')}, "
                  f"bank ways {k['bank_ways']}" + (f", unmeasured {k['unmeasured']}" if k["unmeasured"] else ""))
        for w, ok in met:
            print(f"    [{'x' if ok else ' '}] {w}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"sass-census-{time.strftime('%Y-%m-%dT%H%M')}.json")
    with open(path, "w") as fh:
        json.dump({"machine": os.uname().nodename, "arch": "sm_90", "census": census}, fh, indent=1)
    print(f"wrote {path}; {failed} done-when check(s) not met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
