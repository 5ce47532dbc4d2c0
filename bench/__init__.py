"""fusec's benchmark suite against the tools users would pick instead (issue 6).

`python -m bench` times the standard chains (bench/fdsl/*.fdsl) at realistic sizes with fusec
(fused and unfused) and NumPy, PyTorch eager, torch.compile and jax.jit (each optional), writes
bench/results/<machine>-<date>.json and regenerates the README's benchmark table from the
results. `python -m bench.gpu` does the same on a GPU from artifacts compiled elsewhere.
"""
