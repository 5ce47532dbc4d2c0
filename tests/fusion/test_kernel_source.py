"""The emitted source of three canonical chains, pinned by its key lines (not the whole file)."""
import re

from helpers import stages

EW = "chain ew(x: f32[64, 128]) -> f32[64, 128] { return relu(tanh(x * 1.702 + 0.5) * sigmoid(x) - exp(-abs(x))) + 0.25 * x }"
SM = "chain sm(x: f32[64, 128]) -> f32[64, 128] { return softmax(x) }"
MM = "chain mm(x: f32[64, 32], w: f32[32, 128], b: f32[128]) -> f32[64, 128] { return gelu(x @ w + b) }"


def kernels(src, target="gpu"):
    return stages(src, target=target).emitted.source


def test_elementwise_chain_is_one_typed_kernel():
    s = kernels(EW)
    assert s.count("@cuda.jit(\"void(") == 1
    assert '@cuda.jit("void(float32[:, ::1], float32[:, ::1])", cache=NUMBA_CACHE, **_bounds(256))' in s
    assert "_f32_1p702 = np.float32(1.702)" in s and "_f32_0p25 = np.float32(0.25)" in s
    assert "cuda.threadIdx.x" in s and "math.tanh(" in s and "math.exp(" in s
    assert re.search(r"^    k0\[\(\d+, \d+, 1\), \(\d+, \d+, 1\)\]\(arg0, alloc\)$", s, re.M)
    assert "float64" not in s and not re.search(r"[^_\w.]\d+\.\d+[^\w]", s.split("def run_")[0].split("@cuda.jit")[1])


def test_softmax_is_one_block_cooperative_kernel():
    s = kernels(SM)
    assert s.count("@cuda.jit(\"void(") == 1
    assert "# k0: gpu.launch in @sm at <string>:1:" in s
    assert re.search(r"k0\[\(64, 1, 1\), \(128, 1, 1\)\]", s)           # a block per row, 128 threads
    assert s.count("cuda.shared.array((1, 128), numba.float32)") == 2     # the max's and the sum's partials
    assert s.count("cuda.shfl_xor_sync(0xFFFFFFFF,") == 10                # 5 butterfly steps per combine
    assert s.count("if _CUDASIM or 0:") == 2                              # the simulator's tree
    assert "arg0[block_id_x, thread_id_x]" in s                            # thread t reads element t
    assert "cuda.local.array((1, 128)" not in s                           # no row kept per thread
    assert "_maximumf_f32(" in s and "math.exp(" in s


def test_matmul_epilogue_is_one_kernel_accumulating_in_registers():
    # the tiled contraction (a K loop over shared tiles, each thread's outputs in locals), the
    # bias and gelu applied to the accumulators before the one store
    s = kernels(MM)
    assert s.count("@cuda.jit(\"void(") == 1
    assert "# fusec.block_gemm:" in s and "for k0 in range(0, 32, " in s      # the K loop
    assert re.search(r"^    acc0_0 = _f32_0$", s, re.M)                       # an accumulator in a register
    assert "math.tanh(" in s and "_f32_0p044715" in s              # gelu in the same kernel
    assert re.search(r"k0\[\(\d+, \d+, 1\), \(\d+, \d+, 1\)\]\(arg0, arg1, alloc, arg2\)", s)


def test_cpu_source_uses_prange_once_per_kernel():
    s = kernels(SM, target="cpu")
    assert "@numba.njit(parallel=True" in s and s.count("numba.prange(") == 1
    assert "def run_sm(arg0):" in s


def test_cpu_row_statistics_are_locals_not_heap_arrays():
    """The max and the sum of a softmax row are Python locals while a loop runs over the row (LLVM
    then keeps them in registers and vectorises the loop): a one-row tile's statistics are locals
    outright, a row tile's accumulator elements are loaded before each row's loop and stored
    after it, never inside."""
    one_row = kernels(SM.replace("64, 128", "8192, 128"), target="cpu")
    planned = one_row[one_row.index("def _loop0_run_sm_planned("):]
    assert "for arg1 in numba.prange(0, 8192):" in planned, planned
    assert "np.empty(" not in planned, planned
    assert len(re.findall(r"^        (alloc_\d+) = np\.float32\(0\)$", planned, re.M)) == 2, planned
    tile = kernels(SM, target="cpu")
    planned = tile[tile.index("def _loop0_run_sm_planned("):]
    assert "np.empty((8,), np.float32)" in planned, planned                  # 8 rows a tile
    inner = [ln for ln in planned.splitlines() if ln.startswith(" " * 16)]   # the loops over a row
    assert inner and not any(re.search(r"alloc_\d+\[", ln) for ln in inner), planned
    assert len(re.findall(r"^            (_acc\d+) = alloc_\d+\[arg2(_\d+)?\]$", planned, re.M)) == 4, planned


def test_sigmoid_shares_the_chains_exp_of_minus_abs():
    """sigmoid is exp(-|x|)-based (never overflows), so CSE merges it with the chain's own
    exp(-abs(x)): one exp per element, not two."""
    s = kernels(EW, target="cpu")
    body = s[s.index("def _loop0_run_ew_planned("):]
    assert body.count("_exp_f32(") == 1, body


def test_cpu_softmax_row_takes_three_passes():
    """The exp loop and the sum loop of a softmax row run as one (emit/siblings.py): the max, then
    exp-and-sum, then the divide. The max and the divide stay apart (each needs a finished
    statistic)."""
    s = kernels(SM.replace("64, 128", "8192, 128"), target="cpu")
    planned = s[s.index("def _loop0_run_sm_planned("):]
    rows = re.findall(r"^        for (\w+) in range\(128\):(.*)$", planned, re.M)
    assert len(rows) == 3, planned
    assert rows[1][1].strip() == "# 2 loops over one range, fused", planned
    fused = planned[planned.index(rows[1][1]):planned.index(f"for {rows[2][0]} in")]
    assert "_exp_f32(" in fused and re.search(r"alloc_\d+ = v\d+_\d+\n", fused), fused
