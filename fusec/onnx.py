"""ONNX models in fusec: `import_model(path)` writes a model's graph as one FDSL chain (and its
initializers as the chain's weights), `load(path, target=...)` compiles that chain through
`fusec.compile` and returns a callable taking the model's inputs by name. Needs the onnx
package (`pip install 'fusec[onnx]'`); `import fusec` never imports it. See docs/GUIDE.md,
"Importing ONNX models", and fusec/frontends/.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import UsageError
from .frontends.onnx_file import OnnxImportError, check_model, read_model, require_onnx
from .frontends.onnx_import import Imported, mapped_ops, to_fdsl

__all__ = ["load", "import_model", "OnnxModel", "OnnxImportError", "Imported", "mapped_ops"]


def _limit(max_memory: int | None) -> int:
    from fusec.runtime.memory import default_limit
    return max_memory if max_memory is not None else default_limit()


def import_model(model, max_memory: int | None = None, chain_name: str | None = None) -> Imported:
    """The FDSL of an ONNX model (a path, or a ModelProto whose external data, if any, lies in
    the current folder): Imported with `.text`, `.chain`, `.weights` (parameter -> array),
    `.inputs` ([(onnx name, parameter)]) and `.outputs`. `max_memory` bounds the model file and
    its initializers (default: a quarter of this machine's memory). Raises OnnxImportError."""
    limit = _limit(max_memory)
    if isinstance(model, (str, os.PathLike)):
        checked = read_model(os.fspath(model), limit)
    else:
        onnx = require_onnx()
        if not isinstance(model, onnx.ModelProto):
            raise OnnxImportError(f"expected a path or an onnx.ModelProto, not {type(model).__name__}")
        checked = check_model(model, model.graph.name or "<model>", limit, base_dir=os.getcwd())
    return to_fdsl(checked, chain_name)


class OnnxModel:
    """An imported ONNX model compiled by fusec: call it with the model's inputs by name
    (keywords); it returns the outputs as a list of NumPy arrays, in the graph's order."""

    def __init__(self, imported: Imported, program, fresh_outputs: bool = False):
        # (load checked fresh_outputs before importing anything)
        self.imported = imported
        self.program = program
        self.chain = program.chains[imported.chain]
        self.input_names = [n for n, _ in imported.inputs]
        self.output_names = list(imported.outputs)
        self._params = [p.name for p in self.chain.typed.param_nodes]
        self._fresh_outputs = fresh_outputs
        self._fresh_sizes: set = set()          # the input shapes whose build was told so

    @property
    def fresh_outputs(self) -> bool:
        """True: every call's outputs are newly allocated arrays (each build's
        Executable.fresh_outputs), not the planned pool's reused buffers (load's keyword)."""
        return self._fresh_outputs

    @property
    def fdsl(self) -> str:
        return self.imported.text

    def __call__(self, **inputs) -> list[np.ndarray]:
        by_param = dict(self.imported.weights)
        known = dict(self.imported.inputs)
        for name, value in inputs.items():
            if name not in known:
                raise UsageError(f"the model has no input '{name}' (its inputs: {', '.join(self.input_names)})")
            by_param[known[name]] = value
        missing = [n for n in self.input_names if known[n] not in by_param]
        if missing:
            raise UsageError(f"missing input '{missing[0]}' (the model takes {', '.join(self.input_names)})")
        args = [by_param[p] for p in self._params]
        if self._fresh_outputs:
            # the build these inputs' sizes run (made now if it is new) hands back fresh outputs
            sizes = tuple((n, np.shape(v)) for n, v in sorted(inputs.items()))
            if sizes not in self._fresh_sizes:
                self.chain.compiled(self.chain.binding_for(args)).fused.fresh_outputs = True
                self._fresh_sizes.add(sizes)
        outs = self.chain(*args)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        return [np.asarray(o) for o in outs]


def load(path, target: str | None = "cpu", max_memory: int | None = None, *, fresh_outputs: bool = False,
         **compile_kwargs) -> OnnxModel:
    """Import the ONNX model at `path` and compile it with `fusec.compile` for `target`
    (keyword arguments go to fusec.compile: options, cache_dir, cache, ...); the weights are
    bound from its initializers. Returns an OnnxModel: `model(x=array)` -> [outputs].
    `fresh_outputs=True`: every call's outputs in newly allocated arrays instead of the planned
    pool's reused buffers, as frameworks that allocate per call hand them back (for like-for-like
    timing; a little slower)."""
    from .program import compile_text
    if not isinstance(fresh_outputs, bool):
        raise UsageError(f"fusec.onnx.load's fresh_outputs takes True or False, not {fresh_outputs!r}")
    imported = import_model(path, max_memory=max_memory)
    # fusec.compile of the text, its diagnostics naming the model (MODEL.onnx.fdsl: the chain's lines)
    label = (os.fspath(path) if isinstance(path, (str, os.PathLike)) else imported.chain) + ".fdsl"
    if "remote_cache" in compile_kwargs:            # fusec.compile's name for it
        compile_kwargs["remote_cache_url"] = compile_kwargs.pop("remote_cache")
    program = compile_text(imported.text, label, target=target, max_memory=max_memory, **compile_kwargs)
    return OnnxModel(imported, program, fresh_outputs)
