"""Lowering: a typed chain (fusec.dsl) becomes MLIR linalg on tensors, one func.func per chain.

`lower.py` drives it, each FDSL node lowered by the rule registered for its op
(`registry.RULES`), one module per op family (`elementwise`, `reduction`, `norm`, `contraction`,
`shape`, `indexing`); elementwise payloads are in `scalar.py`, IR-building helpers in
`builder.py`. Broadcasts are indexing maps, composite ops are decomposed, and every op carries
its FDSL location. See docs/ARCHITECTURE.md, "Stages and what each hands on" (linalg).
"""
