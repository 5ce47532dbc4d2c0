"""IR rewrites, one concern per file.

`graph.py` runs the graph passes (stage `graph`), `tile_and_fuse.py` applies a FusionPlan
(stage `tiled`), `to_target.py` lowers to gpu.launch kernels or cpu parallel loops (stage
`gpu`); the other modules are the rewrites they call. One line per module: docs/ARCHITECTURE.md,
"Layout"; the stages: docs/ARCHITECTURE.md, "Stages and what each hands on".
"""
