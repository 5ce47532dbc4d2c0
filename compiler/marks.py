"""The emitter's contract: every `fusec.*` attribute the compiler puts on IR, defined once.

Lowering, the graph passes, planning and the kernel transforms write them; the emitter and the
plan reader read them. Each name is a string attribute name (its value's meaning beside it).
See docs/ARCHITECTURE.md, "Stages and what each hands on"."""

# every op, from lowering on
OP_ID = "fusec.id"                          # an op's id in the chain (plan/analysis.py)
BATCHNORM = "fusec.batchnorm"              # a batchnorm's ops, until fold-batchnorm folds them
SCAN = "fusec.scan"                        # a running sum/product generic, run as a scan
SCAN_AXIS = "fusec.scan_axis"              # ... and the axis it runs along
NOTE = "fusec.note"                        # a two-stage reduction's partial: what was split and why

# the tiled stage's transform script
TAG = "fusec.tag"                          # an op's handle in the transform script
GROUP = "fusec.group"                      # the kernel (plan group) an op belongs to

# row kernels (transforms/split_rows.py)
PART = "fusec.part"                        # a row kernel's phase
THREADS_OF = "fusec.threads_of"            # on a row kernel's thread loops: the kernel's id
BLOCK_REDUCE = "fusec.block_reduce"        # the block-wide combine the emitter writes (emit/reduce.py)
BLOCK_REDUCE_ON_Y = "fusec.block_reduce_on_y"   # its partials on thread y, the rows on x (a column kernel)

# contraction kernels (transforms/gemm_kernels.py, emit/gemm.py)
BLOCK_GEMM = "fusec.block_gemm"            # the kernel's root: the template writes it
CONTRACTION = "fusec.gemm_contraction"     # the contraction the template tiles
ABSORBED = "fusec.absorbed"                # an op or buffer a template absorbs (never emitted on its own)
GEMM_TILES = "fusec.gemm_tiles"
GEMM_SIDES = "fusec.gemm_sides"
GEMM_MMA = "fusec.gemm_mma"                # on tensor cores: the operands' type (f16 | bf16)
GEMM_PREFETCH = "fusec.gemm_prefetch"      # double-buffered: the next K step loaded into registers first
GEMM_STAGES = "fusec.gemm_stages"          # cp.async: a ring of this many K steps in shared memory (sm_80+)
GEMM_ROOT_LOOPS = "fusec.gemm_root_loops"
GEMM_MARKS = (BLOCK_GEMM, CONTRACTION, ABSORBED)

# attention kernels (transforms/attention_kernels.py, emit/attention.py)
BLOCK_ATTENTION = "fusec.block_attention"  # the kernel's root
ATTENTION_ROLE = "fusec.attention_role"
ATTENTION_Z = "fusec.attention_z"
ATTENTION_V = "fusec.attention_v"
ATTENTION_LOOPS = "fusec.attention_loops"
ATTENTION_BATCH = "fusec.attention_batch"
ATTENTION_MMA = "fusec.attention_mma"      # on tensor cores: the operands' type (f16 | bf16)
ATTENTION_GUARD = "fusec.attention_guard"  # on the output contraction: [C, K] of P = where(M == C, K, E / L)
ATTENTION_MARKS = (BLOCK_ATTENTION, ATTENTION_ROLE)

# the cpu target (transforms/cpu_library_calls.py, emit/cpu.py, emit/conv.py)
CPU_CALL = "fusec.cpu_call"                # an op the cpu emitter writes as a library call
CONV_ALGORITHM = "fusec.conv_algorithm"    # the plan's algorithm for a conv
TO_LOOPS = "fusec.to_loops"
CPU_TEMPLATE_MARKS = (BLOCK_ATTENTION, ATTENTION_ROLE, ABSORBED, SCAN)   # ops a cpu template owns
GPU_TEMPLATE_MARKS = GEMM_MARKS + ATTENTION_MARKS   # ops a GPU emitter template writes or absorbs
