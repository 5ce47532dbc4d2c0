"""Planning: which linalg ops share a kernel, with what tiles, and why.

`analysis.py` reads the graph-stage IR into plain data (ChainInfo: ops, loops, producers,
users); `hardware.py` holds the machines as data (datasheet GPUs, the measured cpu profile's
cache); `cost.py` is the cost model's shared part, pure functions from ChainInfo, ops, tiles and
a profile to predicted numbers, each template's time model beside its planning code (`loops.py`,
`rows.py`, `gemm.py`, `attention_time.py`, `scan.py`; `cost_cpu.py` on a cpu); `tilechoice.py`
picks tiles by the model; `kernels.py` holds the FusionPlan (a frozen value); `planner.py` makes
it: `grower.py` grows the kernels, `attention_merge.py`, `recompute.py` and `horizontal.py` merge
them, `decisions.py` says why; `templates.py` holds each kernel template's config and the
registry of its stages; `handplan.py` reads and writes hand plans; `describe.py` prints a plan
(from its summary, so artifacts print without MLIR); `autotune.py` keeps measured tile choices.
Nothing here rewrites IR.
"""
