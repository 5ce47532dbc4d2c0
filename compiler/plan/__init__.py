"""Planning: which linalg ops share a kernel, with what tiles, and why.

Reads the graph-stage IR into plain data (analysis.py) and makes a FusionPlan, a frozen value
(kernels.py, planner.py), by a cost model over hardware profiles as data. Nothing here rewrites
IR. One line per module: docs/ARCHITECTURE.md, "Layout"; the stage: docs/ARCHITECTURE.md, "Stages and what each hands on" (plan).
"""
