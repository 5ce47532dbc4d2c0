"""IR rewrites, one concern per file.

`graph.py` is the named, ordered graph-pass pipeline on linalg-on-tensors (MLIR's own passes
and ours, each switchable with --disable-pass); `fold_batchnorm.py`, `pad_to_generic.py` and
`cpu_library_calls.py` are our rewrites; `tile_and_fuse.py` applies a FusionPlan with the
transform dialect (stage `tiled`) and `to_target.py` lowers the result to gpu.launch kernels or
cpu parallel loops (stage `gpu`). `script.py` holds the transform-script printer and the
helpers they share.
"""
