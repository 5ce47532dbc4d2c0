"""bf16 on the cuda target (and the CUDA simulator): module-level helper texts.

Numba has no bfloat16, so inside an emitted module a bf16 value is a float32 that is exactly a
bf16 (values.py: its arrays hold float32). `ROUND` is arith.truncf to bf16: PTX's
cvt.rn.bf16x2.f32 on a GPU, the same rounding on the bits of NumPy scalars under the simulator
(no inline PTX there). `CONVERT` is the host function's boundary (module.py: _narrow_wrapper):
bfloat16 device arrays, seen as uint16, widened to new float32 ones (the bits moved to the top
half: exact) and results narrowed back (rounded to nearest even, which leaves a chain's rounded
values unchanged). The cpu target rounds with emit/cpu.py's `_round_bf16` instead.
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
        return _nbt.float32(_nbt.uint32), codegen'''

CONVERT = '''
@cuda.jit(cache=NUMBA_CACHE)
def _bf16_widen_kernel(src, dst):
    """dst[i] = the bf16 whose bits are src[i], as an f32 (the bits in the top half: exact)."""
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = _bits_f32(np.uint32(src[i]) << np.uint32(16))


@cuda.jit(cache=NUMBA_CACHE)
def _bf16_narrow_kernel(src, dst):
    """dst[i] = the bits of src[i] rounded to the nearest bf16."""
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = np.uint16(_f32_bits(_round_bf16(src[i])) >> np.uint32(16))


def _bf16_widen(x):
    """A bfloat16 device array as a new float32 one."""
    out = cuda.device_array(x.shape, np.float32)
    n = out.size
    if n:
        _bf16_widen_kernel[(n + 255) // 256, 256](x.view(np.uint16).reshape(n), out.reshape(n))
    return out


def _bf16_narrow(x):
    """A float32 device array as a new bfloat16 one (its values rounded to nearest even)."""
    out = cuda.device_array(x.shape, np.uint16)
    n = out.size
    if n:
        _bf16_narrow_kernel[(n + 255) // 256, 256](x.reshape(n), out.reshape(n))
    return out.view(ml_dtypes.bfloat16)'''
