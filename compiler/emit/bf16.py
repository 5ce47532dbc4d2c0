"""bf16 on the cuda target (and the CUDA simulator): module-level helper texts.

Numba has no bfloat16, so inside an emitted module a bf16 value is a float32 that is exactly a
bf16, and a bf16 array in global memory holds its 16 bits as uint16 (values.py). `ROUND` holds
arith.truncf to bf16 (`_round_bf16`: PTX's cvt.rn.bf16x2.f32 on a GPU, the same rounding on
the bits of NumPy scalars under the simulator, which has no inline PTX) and the two accesses
of a uint16 array (views.py: computed, stored): `_bf16_f32`, a load's bits moved to the top half
of an f32 (exact), and `_f32_bf16`, a stored f32 rounded to the nearest bf16's bits (ties to
even, NaN kept: one cvt.rn.bf16.f32 on a GPU). `BOUNDARY` is the host function's (module.py:
_narrow_wrapper): bfloat16 device arrays go in as their `.view(np.uint16)` and results come back
as `.view(ml_dtypes.bfloat16)`, no copy. The cpu target rounds with emit/cpu.py's `_round_bf16`
and keeps float32 arrays (NumPy's astype at its host function).
"""
from __future__ import annotations

ROUND = '''
if _CUDASIM:   # the simulator has no inline PTX: round on the bits (Python ints, no overflow)
    def _round_bf16(x):
        """x rounded to the nearest bf16, ties to even, as an f32: add 0x7FFF and the lowest
        kept bit, clear the low 16 bits (the largest finite values round up to inf, as IEEE's
        rounding does); a NaN stays a NaN (quieted), the sign (of -0 too) is kept."""
        b = int(np.float32(x).view(np.uint32))
        a = b & 0x7FFFFFFF
        n = (a + 0x7FFF + ((a >> 16) & 1)) & 0xFFFF0000 if a <= 0x7F800000 else (a | 0x400000) & 0xFFFF0000
        return np.uint32(n | (b & 0x80000000)).view(np.float32)

    def _f32_bits(x):
        return np.float32(x).view(np.uint32)

    def _bits_f32(b):
        return np.uint32(b).view(np.float32)

    def _bf16_f32(h):
        """The bf16 whose bits are h (a uint16), as an f32: exact."""
        return np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32)

    def _f32_bf16(x):
        """The bits of x rounded to the nearest bf16 (a uint16)."""
        return np.uint16(int(_round_bf16(x).view(np.uint32)) >> 16)
else:
    from llvmlite import ir as _llir
    from numba import types as _nbt
    from numba.cuda.extending import intrinsic as _intrinsic

    @_intrinsic
    def _round_bf16(typingctx, x):
        """x rounded to the nearest bf16 as an f32: cvt.rn.bf16x2.f32 (ties to even, overflow
        to inf, NaN kept) packs it twice into 32 bits; the high half kept is the bf16."""
        def codegen(context, builder, sig, args):
            f32, i32 = _llir.FloatType(), _llir.IntType(32)
            fn = _llir.InlineAsm(_llir.FunctionType(i32, [f32, f32]), "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")
            bits = builder.and_(builder.call(fn, [args[0], args[0]]), _llir.Constant(i32, -0x10000))
            return builder.bitcast(bits, f32)
        return _nbt.float32(_nbt.float32), codegen

    @_intrinsic
    def _f32_bits(typingctx, x):
        """The bits of an f32 as a u32."""
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _llir.IntType(32))
        return _nbt.uint32(_nbt.float32), codegen

    @_intrinsic
    def _bits_f32(typingctx, b):
        """The bits of a u32 as an f32."""
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _llir.FloatType())
        return _nbt.float32(_nbt.uint32), codegen

    @_intrinsic
    def _bf16_f32(typingctx, h):
        """The bf16 whose bits are h (an integer, its low 16 bits), as an f32: exact."""
        def codegen(context, builder, sig, args):
            i32 = _llir.IntType(32)
            b = context.cast(builder, args[0], sig.args[0], _nbt.uint32)
            b = builder.shl(builder.and_(b, _llir.Constant(i32, 0xFFFF)), _llir.Constant(i32, 16))
            return builder.bitcast(b, _llir.FloatType())
        return _nbt.float32(h), codegen

    @_intrinsic
    def _f32_bf16(typingctx, x):
        """The bits of x rounded to the nearest bf16 (ties to even, overflow to inf, NaN kept), as
        a uint16: one cvt.rn.bf16.f32."""
        def codegen(context, builder, sig, args):
            f = context.cast(builder, args[0], sig.args[0], _nbt.float32)
            fn = _llir.InlineAsm(_llir.FunctionType(_llir.IntType(16), [_llir.FloatType()]),
                                 "cvt.rn.bf16.f32 $0, $1;", "=h,f")
            return builder.call(fn, [f])
        return _nbt.uint16(x), codegen'''

BOUNDARY = '''
def _bf16_out(a):
    """uint16 device array `a` (a bf16 result's bits) as bfloat16, a view holding `a`, so the
    memory plan's output pool (_Memory) sees `a` held while the caller holds the result."""
    b = a.view(ml_dtypes.bfloat16)
    b._fusec_bits = a
    return b'''
