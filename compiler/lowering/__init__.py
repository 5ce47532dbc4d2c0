"""Lowering: a typed chain (fusec.dsl) becomes MLIR linalg on tensors, one func.func per chain.

`lower.py` drives it: each FDSL node is lowered by the rule registered for its op
(`registry.RULES`), one module per op family (`elementwise`, `reduction`, `norm`,
`contraction`, `shape`), with every arith/math payload of an elementwise op in one table
(`scalar.py`) and IR-building helpers in `builder.py`. Broadcasts are indexing maps, composite
ops (softmax, layernorm...) are decomposed into linalg ops, and every op carries the location
of its FDSL source.
"""
