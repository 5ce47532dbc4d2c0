"""Reading an ONNX model without trusting it: the protobuf, the opsets (17 to 21 of the default
domain), the graph's inputs, order and names, and every initializer's data, embedded or external.

External data is read here, never by onnx: a location that is absolute, holds `..`, or resolves
(through symlinks) outside the model's folder is refused before anything is opened, and so is a
declared size that exceeds the file or the memory bound. Every problem is an OnnxImportError
(a UsageError: one line, exit 1) that names the file and the node or tensor.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

OPSETS = range(17, 22)          # the default domain's versions the importer maps
DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxImportError(UsageError):
    """An ONNX model fusec cannot import: a damaged or hostile file, an opset outside 17-21,
    an op or dtype FDSL cannot express. One line naming the file and the node: names read from
    the file are shown with their control characters escaped, and a very long message is cut."""

    LONGEST = 1000

    def __init__(self, message: str):
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))
        if len(shown) > self.LONGEST:
            half = self.LONGEST // 2
            shown = f"{shown[:half]} ... {shown[-half:]}"
        super().__init__(shown)


def require_onnx():
    """The onnx package, or a one-line error saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise OnnxImportError("importing ONNX models needs the onnx package: pip install 'fusec[onnx]'") from None
    return onnx


# ONNX TensorProto element type -> (FDSL dtype, numpy dtype name)
ONNX_DTYPES = {1: ("f32", "float32"), 10: ("f16", "float16"), 16: ("bf16", "bfloat16"), 11: ("f64", "float64"),
          6: ("i32", "int32"), 7: ("i64", "int64"), 9: ("bool", "bool")}
# element types fusec reads as constants only (shape arithmetic), never as chain values
CONST_ONLY = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 12: "uint32", 13: "uint64"}
SUPPORTED = "f32, f16, bf16, f64, i32, i64 and bool"


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def elem_name(elem: int) -> str:
    try:
        import onnx
        return onnx.TensorProto.DataType.Name(elem)
    except (ImportError, ValueError):
        return f"element type {elem}"


@dataclass
class Model:
    """A checked model: the ModelProto, the default domain's opset, its folder (external data),
    the initializers as arrays, and the graph's nodes in an order where every input is defined."""
    proto: object
    opset: int
    path: str
    initializers: dict          # name -> np.ndarray
    order: list                 # node indices, topologically sorted


def read_model(path: str, max_bytes: int) -> Model:
    """Read and check the ONNX file at `path` (see the module's docstring)."""
    onnx = require_onnx()
    from google.protobuf.message import DecodeError
    if os.path.isdir(path):
        raise OnnxImportError(f"{path} is a directory, not an ONNX model")
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise OnnxImportError(f"cannot read {path}: {e.strerror or e}") from None
    if not os.path.isfile(path):
        raise OnnxImportError(f"{path} is not a regular file (a device or a pipe), not an ONNX model")
    if size > max_bytes:
        raise OnnxImportError(f"{path} is {size} bytes, over the memory limit of {max_bytes} bytes")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise OnnxImportError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise OnnxImportError(f"{path} is over the memory limit of {max_bytes} bytes")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise OnnxImportError(f"{path} is not an ONNX model, or is truncated (the protobuf does not parse: "
                              f"{e})") from None
    return check_model(proto, path, max_bytes)


def check_model(proto, path: str, max_bytes: int, base_dir: str | None = None) -> Model:
    """Check a parsed ModelProto (see the module's docstring); `base_dir`: where its external
    data lies (default: `path`'s folder)."""
    if not data_like_model(proto):
        raise OnnxImportError(f"{path} is not an ONNX model, or is truncated (no ir_version or no graph)")
    bad = _not_utf8(proto)
    if bad is not None:
        raise OnnxImportError(f"{path} is damaged: its {bad} is not valid UTF-8 (a protobuf string)")
    opset = _opset(proto, path)
    g = proto.graph
    inits = _initializers(g, path, base_dir if base_dir is not None else os.path.dirname(os.path.abspath(path)),
                          max_bytes)
    order = _order(g, path, set(inits))
    _no_external_attributes(g, path)
    return Model(proto, opset, path, inits, order)


def _no_external_attributes(g, path: str, where: str = "") -> None:
    """Refuse a tensor attribute (a Constant's or a ConstantOfShape's value, in a subgraph too)
    whose data is external: onnx would read it relative to the working directory, unchecked."""
    for i, n in enumerate(g.node):
        for a in n.attribute:
            tensors = [a.t] if a.HasField("t") else []
            tensors += list(a.tensors)
            for sp in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                tensors += [sp.values, sp.indices]
            for t in tensors:
                if t.data_location == 1 or len(t.external_data):
                    raise OnnxImportError(f"{path}: {where}{node_label(g, i)}: attribute '{a.name}' holds a tensor "
                                          "with external data; fusec reads external data only for initializers")
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                inner = f"{where}{node_label(g, i)}, attribute '{a.name}'"
                for t in sub.initializer:
                    if t.data_location == 1 or len(t.external_data):
                        raise OnnxImportError(f"{path}: {inner}: initializer '{t.name}' of a subgraph has external "
                                              "data; fusec reads external data only for the main graph's initializers")
                _no_external_attributes(sub, path, inner + ": ")


def _not_utf8(msg, where: str = "") -> str | None:
    """The first string field (as `graph.node[3].input[1]`) that protobuf handed back as bytes
    (its UTF-8 does not decode), or None. Every name the importer reads is such a field."""
    from google.protobuf.descriptor import FieldDescriptor as FD
    for fd, value in msg.ListFields():
        if fd.type not in (FD.TYPE_STRING, FD.TYPE_MESSAGE):
            continue
        name = f"{where}.{fd.name}" if where else fd.name
        repeated = getattr(fd, "is_repeated", None)           # (protobuf >= 5; `label` before)
        if repeated is None:
            repeated = fd.label == FD.LABEL_REPEATED
        items = list(enumerate(value)) if repeated else [(None, value)]
        for k, v in items:
            at = name if k is None else f"{name}[{k}]"
            if fd.type == FD.TYPE_STRING:
                if isinstance(v, bytes):
                    return at
            else:
                bad = _not_utf8(v, at)
                if bad is not None:
                    return bad
    return None


def data_like_model(proto) -> bool:
    return proto.ir_version > 0 and proto.HasField("graph")


def _opset(proto, path: str) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise OnnxImportError(f"{path} declares no opset of the default ONNX domain (fusec imports opsets "
                              f"{OPSETS.start} to {OPSETS.stop - 1})")
    v = max(versions)
    if v not in OPSETS:
        raise OnnxImportError(f"{path} uses opset {v} of the default domain; fusec imports opsets {OPSETS.start} to "
                              f"{OPSETS.stop - 1} (convert it with onnx.version_converter.convert_version(model, "
                              f"{min(max(v, OPSETS.start), OPSETS.stop - 1)}))")
    return v


def node_label(g, i: int) -> str:
    """`node 3 'Conv_0' (Conv)`: how errors name a node."""
    n = g.node[i]
    name = f" '{n.name}'" if n.name else ""
    dom = f"{n.domain}::" if n.domain not in DEFAULT_DOMAINS else ""
    return f"node {i}{name} ({dom}{n.op_type})"


def _order(g, path: str, inits: set[str]) -> list[int]:
    """The nodes in an order that defines every input before its use: an input nothing defines,
    a name defined twice, or a cycle is an OnnxImportError naming the node."""
    defined: dict[str, str] = {}
    for vi in g.input:
        if not vi.name:
            raise OnnxImportError(f"{path}: a graph input has no name")
        if defined.get(vi.name) == "graph input":
            raise OnnxImportError(f"{path}: graph input '{vi.name}' is listed twice")
        defined[vi.name] = "graph input"
    for name in inits:
        defined.setdefault(name, "initializer")
    producer: dict[str, int] = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if not o:
                continue
            if o in producer or defined.get(o) == "graph input":
                first = node_label(g, producer[o]) if o in producer else "a graph input"
                raise OnnxImportError(f"{path}: {node_label(g, i)} defines '{o}', which {first} defines already")
            producer[o] = i
    for i, n in enumerate(g.node):
        for x in n.input:
            if x and x not in defined and x not in producer:
                raise OnnxImportError(f"{path}: {node_label(g, i)} reads '{x}', which no node, graph input or "
                                      "initializer defines")
    for vo in g.output:
        if vo.name not in defined and vo.name not in producer:
            raise OnnxImportError(f"{path}: graph output '{vo.name}' is defined by no node, graph input or "
                                  "initializer")
    waiting = [sum(1 for x in set(n.input) if x in producer) for n in g.node]
    users: dict[int, list[int]] = {}
    for i, n in enumerate(g.node):
        for x in set(n.input):
            if x in producer:
                users.setdefault(producer[x], []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(order) < len(g.node):
        stuck = min(set(range(len(g.node))) - set(order))
        raise OnnxImportError(f"{path}: the graph has a cycle through {node_label(g, stuck)}")
    return order


def _declared_count(t, path: str) -> int:
    count = 1
    for d in t.dims:
        if d < 0:
            raise OnnxImportError(f"{path}: initializer '{t.name}' declares a negative dimension ({list(t.dims)})")
        count *= d
    return count


def _initializers(g, path: str, base: str, max_bytes: int) -> dict[str, np.ndarray]:
    from onnx import numpy_helper
    out: dict[str, np.ndarray] = {}
    total = 0
    for t in g.initializer:
        if not t.name:
            raise OnnxImportError(f"{path}: an initializer has no name")
        if t.name in out:
            raise OnnxImportError(f"{path}: initializer '{t.name}' is defined twice")
        if t.data_type in ONNX_DTYPES:
            dt = np_dtype(ONNX_DTYPES[t.data_type][1])
        elif t.data_type in CONST_ONLY:
            dt = np.dtype(CONST_ONLY[t.data_type])
        else:
            raise OnnxImportError(f"{path}: initializer '{t.name}' has dtype {elem_name(t.data_type)}; fusec "
                                  f"imports {SUPPORTED}")
        count = _declared_count(t, path)
        nbytes = count * dt.itemsize
        total += nbytes
        if nbytes > max_bytes or total > max_bytes:
            raise OnnxImportError(f"{path}: initializer '{t.name}' declares {list(t.dims)} ({nbytes} bytes), "
                                  f"over the memory limit of {max_bytes} bytes for the model's initializers")
        if t.data_location == 1:       # EXTERNAL
            out[t.name] = _external(t, path, base, dt, count)
            continue
        if t.HasField("raw_data"):
            if len(t.raw_data) != nbytes:
                raise OnnxImportError(f"{path}: initializer '{t.name}' declares {list(t.dims)} of "
                                      f"{elem_name(t.data_type)} ({nbytes} bytes) but holds {len(t.raw_data)} bytes")
        else:
            held = max(len(t.float_data), len(t.int32_data), len(t.int64_data), len(t.double_data),
                       len(t.uint64_data))
            if held != count:
                raise OnnxImportError(f"{path}: initializer '{t.name}' declares {list(t.dims)} ({count} values) but "
                                      f"holds {held}")
        try:
            arr = numpy_helper.to_array(t)
        except Exception as e:          # onnx's own reader, on data we checked: still never a traceback
            raise OnnxImportError(f"{path}: initializer '{t.name}' cannot be read ({type(e).__name__}: {e})") from None
        out[t.name] = np.ascontiguousarray(arr.astype(dt, copy=False)).reshape(tuple(t.dims))
    return out


def _external(t, path: str, base: str, dt: np.dtype, count: int) -> np.ndarray:
    """An initializer's external data, read after its location is checked (inside the model's
    folder, symlinks resolved) and its declared size against the file."""
    info = {e.key: e.value for e in t.external_data}
    where = f"{path}: initializer '{t.name}'"
    loc = info.get("location", "")
    if not loc:
        raise OnnxImportError(f"{where} has external data without a location")
    if os.path.isabs(loc) or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
        raise OnnxImportError(f"{where}: external data location '{loc}' is an absolute path; fusec reads external "
                              "data only from the model's folder")
    parts = loc.replace("\\", "/").split("/")
    if ".." in parts:
        raise OnnxImportError(f"{where}: external data location '{loc}' leaves the model's folder ('..'); fusec "
                              "reads external data only from the model's folder")
    root = os.path.realpath(base)
    full = os.path.realpath(os.path.join(root, loc))
    if os.path.commonpath([root, full]) != root:
        raise OnnxImportError(f"{where}: external data location '{loc}' resolves to {full}, outside the model's "
                              f"folder {root} (a symlink); refused")
    if not os.path.exists(full):
        raise OnnxImportError(f"{where}: external data file '{loc}' does not exist in {root}")
    if not os.path.isfile(full):
        raise OnnxImportError(f"{where}: external data '{loc}' is not a regular file")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxImportError(f"{where}: external data offset or length is not an integer") from None
    nbytes = count * dt.itemsize
    if offset < 0 or (length is not None and length < 0):
        raise OnnxImportError(f"{where}: negative external data offset or length")
    if length is not None and length != nbytes:
        raise OnnxImportError(f"{where} declares {list(t.dims)} ({nbytes} bytes) but its external data length is "
                              f"{length}")
    size = os.path.getsize(full)
    if offset + nbytes > size:
        raise OnnxImportError(f"{where} declares {list(t.dims)} ({nbytes} bytes at offset {offset}), beyond the end "
                              f"of '{loc}' ({size} bytes)")
    try:
        with open(full, "rb") as f:
            f.seek(offset)
            data = f.read(nbytes)
    except OSError as e:
        raise OnnxImportError(f"{where}: cannot read external data '{loc}': {e.strerror or e}") from None
    arr = np.frombuffer(data, dtype=dt.newbyteorder("<") if dt.itemsize > 1 else dt, count=count)
    return np.ascontiguousarray(arr.astype(dt)).reshape(tuple(t.dims))
