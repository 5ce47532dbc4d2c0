"""cp.async (sm_80+): global-to-shared copies that bypass registers, for the contraction
template's staged tiles (emit/gemm.py, `fusec.gemm_stages`).

`_cp_async16(dst, dst_idx, src, src_idx)` copies src[src_idx] and the 3 f32 after it to
dst[dst_idx] and the 3 after it: one `cp.async.cg.shared.global [d], [s], 16` (LDGSTS.128 in
SASS) when both addresses are 16-byte aligned, else four `cp.async.ca.shared.global [d], [s], 4`
(a run-time fact, decided per thread: a sliced input, a row pitch not a multiple of 4).
`_cp_async4` copies one element. `_cp_async16h` (CP_ASYNC16H_HELPERS, after these in the module)
copies 8 16-bit elements (the tensor-core tiles of f16 operands: emit/mma.py) with no run-time
fallback: it copies whole arrays whose rows are a multiple of 8 elements, so every run is
16-byte aligned once the array's base is, which the launch makes sure of (`_align16`: an array
that is a view at an odd address is copied first). The shared destination is the 32-bit shared-window address of
the generic pointer (`cvta.to.shared`); `_cp_async16hs` takes that address itself (the K loop's
copies: computed once before it, emit/gemm.py `_flat_offsets`). `_cp_commit()` closes the thread's group of copies
(`cp.async.commit_group`), `_cp_waitN()` waits until at most N of its groups are in flight
(`cp.async.wait_group N`); a barrier after the wait makes every thread's copies visible. The
asm statements have side effects and clobber memory, so LLVM keeps them in order with the
shared loads around them. Under the simulator (no inline PTX) the copies land at once and the
commit and wait do nothing: the ring's indexing is checked there, its timing only on a GPU.
"""
from __future__ import annotations

# the imports an inline-PTX helper text makes off the simulator (emit/vector.py and emit/mma.py
# write the same block)
INTRINSIC_IMPORTS = [
    "    from llvmlite import ir as _llir",
    "    from numba import types as _nbt",
    "    from numba.core import cgutils as _cgutils",
    "    from numba.cuda.extending import intrinsic as _intrinsic",
]

MAX_STAGES = 4       # _cp_wait0 .. _cp_wait{MAX_STAGES - 2}

CP_ASYNC_HELPERS = [
    "if _CUDASIM:   # no inline PTX: each copy lands at once, commit and wait have nothing to do",
    "    def _cp_async16(d, di, s, si):",
    "        *dl, dc = di",
    "        *sl, sc = si",
    "        d[(*dl, slice(dc, dc + 4))] = s[(*sl, slice(sc, sc + 4))]",
    "",
    "    def _cp_async4(d, di, s, si):",
    "        d[di] = s[si]",
    "",
    "    def _cp_commit():",
    "        pass",
    "",
    f"    _cp_wait0 = {' = '.join(f'_cp_wait{n}' for n in range(1, MAX_STAGES - 1))} = _cp_commit",
    "else:",
    *INTRINSIC_IMPORTS,
    "",
    "    def _cp_addresses(context, builder, sig, args):",
    '        """The generic addresses (i64) of dst[di] and src[si] (C order, no wraparound)."""',
    "        out = []",
    "        for a, i, aty, ity in ((args[0], args[1], sig.args[0], sig.args[1]), (args[2], args[3], sig.args[2], sig.args[3])):",
    "            arr = context.make_array(aty)(context, builder, a)",
    "            idx = [context.cast(builder, v, t, _nbt.intp)",
    "                   for v, t in zip(_cgutils.unpack_tuple(builder, i, len(ity)), ity)]",
    "            ptr = _cgutils.get_item_pointer(context, builder, aty, arr, idx, wraparound=False)",
    "            out.append(builder.ptrtoint(ptr, _llir.IntType(64)))",
    "        return out",
    "",
    "    def _cp_asm(builder, size, cache, d, s):",
    "        i64 = _llir.IntType(64)",
    "        fn = _llir.InlineAsm(_llir.FunctionType(_llir.VoidType(), [i64, i64]),",
    '                             "{ .reg .u64 sa, ga; .reg .u32 sa32; cvta.to.shared.u64 sa, $0; cvt.u32.u64 sa32, sa; "',
    '                             f"cvta.to.global.u64 ga, $1; cp.async.{cache}.shared.global [sa32], [ga], {size}; }}",',
    '                             "l,l,~{memory}", side_effect=True)',
    "        builder.call(fn, [d, s])",
    "",
    "    @_intrinsic",
    "    def _cp_async16(typingctx, d, di, s, si):",
    '        """dst[di..di+3] = src[si..si+3] asynchronously: 16 bytes where both are aligned, else 4 x 4."""',
    "        sig = _nbt.void(d, di, s, si)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            da, sa = _cp_addresses(context, builder, sig, args)",
    "            i64 = _llir.IntType(64)",
    "            aligned = builder.icmp_unsigned('==', builder.and_(builder.or_(da, sa), i64(15)), i64(0))",
    "            with builder.if_else(aligned) as (wide, narrow):",
    "                with wide:",
    "                    _cp_asm(builder, 16, 'cg', da, sa)",
    "                with narrow:",
    "                    for k in range(4):",
    "                        _cp_asm(builder, 4, 'ca', builder.add(da, i64(4 * k)), builder.add(sa, i64(4 * k)))",
    "            return context.get_dummy_value()",
    "        return sig, codegen",
    "",
    "    @_intrinsic",
    "    def _cp_async4(typingctx, d, di, s, si):",
    '        """dst[di] = src[si] asynchronously (4 bytes)."""',
    "        sig = _nbt.void(d, di, s, si)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            da, sa = _cp_addresses(context, builder, sig, args)",
    "            _cp_asm(builder, 4, 'ca', da, sa)",
    "            return context.get_dummy_value()",
    "        return sig, codegen",
    "",
    "    def _cp_plain(asm):",
    "        @_intrinsic",
    "        def _op(typingctx):",
    "            def codegen(context, builder, sig, args):",
    "                fn = _llir.InlineAsm(_llir.FunctionType(_llir.VoidType(), []), asm, '~{memory}', side_effect=True)",
    "                builder.call(fn, [])",
    "                return context.get_dummy_value()",
    "            return _nbt.void(), codegen",
    "        return _op",
    "",
    '    _cp_commit = _cp_plain("cp.async.commit_group;")',
] + [f'    _cp_wait{n} = _cp_plain("cp.async.wait_group {n};")' for n in range(MAX_STAGES - 1)]


CP_ASYNC16H_HELPERS = [      # needs CP_ASYNC_HELPERS (its key, _cp_async16, sorts before _cp_async16h)
    "if _CUDASIM:",
    "    def _cp_async16h(d, di, s, si):",
    "        *dl, dc = di",
    "        *sl, sc = si",
    "        d[(*dl, slice(dc, dc + 8))] = s[(*sl, slice(sc, sc + 8))]",
    "",
    "",
    "    def _cp_async16hs(d, di, sa, s, si):",
    "        _cp_async16h(d, di, s, si)",
    "",
    "    def _align16(a):",
    "        return a",
    "else:",
    "    @_intrinsic",
    "    def _cp_async16h(typingctx, d, di, s, si):",
    '        """dst[di..di+7] = src[si..si+7] (16-bit elements) asynchronously, one 16-byte copy: both',
    '        addresses 16-byte aligned (the emitter copies whole arrays whose rows are a multiple of 8',
    '        elements, their base aligned by `_align16` at launch)."""',
    "        sig = _nbt.void(d, di, s, si)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            da, sa = _cp_addresses(context, builder, sig, args)",
    "            _cp_asm(builder, 16, 'cg', da, sa)",
    "            return context.get_dummy_value()",
    "        return sig, codegen",
    "",
    "    @_intrinsic",
    "    def _cp_async16hs(typingctx, d, di, sa, s, si):",
    '        """_cp_async16h with the destination given as its 32-bit shared-window address `sa`',
    '        (`_smem_base` plus a byte offset, integer adds the emitter hoists as it does for',
    '        ldmatrix); d[di] names the same element for the simulator and is not read here."""',
    "        sig = _nbt.void(d, di, sa, s, si)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            i32, i64 = _llir.IntType(32), _llir.IntType(64)",
    "            arr = context.make_array(sig.args[3])(context, builder, args[3])",
    "            idx = [context.cast(builder, v, t, _nbt.intp)",
    "                   for v, t in zip(_cgutils.unpack_tuple(builder, args[4], len(sig.args[4])), sig.args[4])]",
    "            src = builder.ptrtoint(_cgutils.get_item_pointer(context, builder, sig.args[3], arr, idx, wraparound=False), i64)",
    "            dst = builder.trunc(context.cast(builder, args[2], sig.args[2], _nbt.int64), i32)",
    "            fn = _llir.InlineAsm(_llir.FunctionType(_llir.VoidType(), [i32, i64]),",
    '                                 "{ .reg .u64 ga; cvta.to.global.u64 ga, $1; cp.async.cg.shared.global [$0], [ga], 16; }",',
    '                                 "r,l,~{memory}", side_effect=True)',
    "            builder.call(fn, [dst, src])",
    "            return context.get_dummy_value()",
    "        return sig, codegen",
    "",
    "    def _align16(a):",
    '        """`a`, or a copy of it whose data is 16-byte aligned (a view into another array may not be)."""',
    "        if any(s % 16 for s in a.strides[:-1]):",
    "            raise ValueError(f'fusec internal error: 16-byte copies of an array whose rows are {a.strides[:-2]} bytes apart')",
    "        if a.__cuda_array_interface__['data'][0] % 16 == 0:",
    "            return a",
    "        b = cuda.device_array(a.shape, a.dtype)",
    "        b.copy_to_device(a)",
    "        return b",
]
