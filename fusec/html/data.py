"""What the HTML report shows of one chain, gathered as plain data: `chain_model(report, typed,
emitted)` turns a run report (fusec/report.py: its plan summary, timings, kernel report), the
typed chain (names and source lines) and the emitted module into the graph's nodes, edges and
kernels, and the decisions linked to the ops and kernels they name. No compiler needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from fusec.compiler.plan.describe import bytes_text, cost_line, tiles_text

DRAWN = ("elementwise", "reduction", "contraction", "pad", "view")     # kinds of op drawn as nodes


@dataclass
class GraphNode:
    key: str                     # op3, arg0, out1
    kind: str                    # op | view | fill | arg | out
    lines: tuple[str, ...]       # its label in the graph, one string per line
    kernel: int | None = None    # the kernel it belongs to (an op's home kernel)
    detail: dict = field(default_factory=dict)


@dataclass
class Edge:
    src: str
    dst: str
    bytes: int
    kind: str                    # memory | onchip | input | output | indirect
    tensor: str = ""

    @property
    def label(self) -> str:
        return bytes_text(self.bytes)


@dataclass
class ChainModel:
    name: str
    report: object               # ChainReport | UnrunReport
    nodes: list[GraphNode]
    edges: list[Edge]
    kernels: list[dict]          # per plan group: id, template, tiles, cost, ops, decisions, report, source
    decisions: list[dict]        # text, verdict, ops, kernels
    source: str | None           # the emitted module

    @property
    def plan(self) -> dict:
        return self.report.plan

    def js(self) -> dict:
        """What the page's script reads (node and kernel details, decisions)."""
        return {"name": self.name, "nodes": {n.key: dict(n.detail, kind=n.kind, kernel=n.kernel) for n in self.nodes},
                "kernels": {str(k["id"]): {x: k[x] for x in ("id", "template", "tiles", "cost", "ops", "decisions",
                                                              "recomputed", "launches")}
                            for k in self.kernels},
                "decisions": self.decisions}


def chain_model(report, typed=None, emitted: str | None = None) -> ChainModel:
    """The model of one chain's report (ChainReport or UnrunReport with a plan summary)."""
    plan = report.plan
    graph = {g["id"]: g for g in plan.get("graph", [])}
    decisions = [_decision(d) for d in plan["decisions"]]
    homes = _homes(plan)
    members = {g["kernel"]: {o["id"] for o in g["ops"]} for g in plan["groups"]}
    names = _fdsl_names(typed)
    nodes = {}
    for op in graph.values():
        if op["kind"] in DRAWN or _read_as_input(op["id"], graph):
            nodes[f"op{op['id']}"] = _op_node(op, homes.get(op["id"]), names, typed, decisions, plan)
    edges = _edges(graph, homes, members, nodes, typed, report)
    for e in edges:                     # arguments and outputs the ops touch
        for key in (e.src, e.dst):
            if key not in nodes:
                nodes[key] = _end_node(key, typed, report, e)
    order = sorted(nodes.values(), key=_order)
    kernels = [_kernel(g, plan, decisions, report, emitted) for g in plan["groups"]]
    return ChainModel(report.chain, report, order, edges, kernels, decisions, emitted)


def _order(n: GraphNode):
    num = int(re.sub(r"\D", "", n.key) or 0)
    return ({"arg": 0, "out": 2}.get(n.key[:3], 1), num)


# ---- decisions -------------------------------------------------------------------------------

_RANGE = re.compile(r"%(\d+)\.\.%(\d+)")
_OP = re.compile(r"%(\d+)")
_KERNELS = re.compile(r"\bkernels? (\d+(?:(?:, | and )\d+)*)")


def _decision(text: str) -> dict:
    """A decision's text with the ops and kernels it names (%3, %2..%10, kernel 4, kernels 1, 2)."""
    ops = set()
    for a, b in _RANGE.findall(text):
        ops.update(range(int(a), int(b) + 1))
    ops.update(int(x) for x in _OP.findall(text))
    kernels = {int(x) for m in _KERNELS.findall(text) for x in re.findall(r"\d+", m)}
    head = text.split(":", 1)[0]
    verdict = "note" if head.startswith("kernel ") else head
    return {"text": text, "verdict": verdict, "ops": sorted(ops), "kernels": sorted(kernels)}


# ---- nodes -----------------------------------------------------------------------------------

def _homes(plan: dict) -> dict[int, int]:
    """Op -> its home kernel: the one that computes it for others, not one that recomputes it for
    itself (a fill goes with the first kernel it starts)."""
    out: dict[int, int] = {}
    for g in plan["groups"]:
        for o in g["ops"]:
            if o["role"] == "init" or o["id"] in g["recomputed"]:
                out.setdefault(o["id"], g["kernel"])
            else:
                out[o["id"]] = g["kernel"]
    return out


def _read_as_input(op: int, graph: dict) -> bool:
    """A fill whose value some op reads as an input (not only as its accumulator's start)."""
    return any(prod == op and not init for u in graph.values() for _, prod, _, init in u["operands"])


def _fdsl_names(typed) -> dict[tuple[int, int], list]:
    """(line, col) -> the typed chain's nodes that start there: an op's location names its FDSL
    expression (`q @ k * s` and `q @ k` start alike: _fdsl_node chooses)."""
    out: dict[tuple[int, int], list] = {}
    for n in (typed.nodes if typed is not None else ()):
        if n.span is not None and n.op != "param":
            out.setdefault((n.span.line, n.span.col), []).append(n)
    return out


_FAMILY = {"contraction": ("matmul", "conv2d"), "view": ("reshape",)}


def _fdsl_node(candidates: list, kind: str):
    """Of the FDSL expressions starting where an op is, the one of its kind (a contraction's
    matmul, a view's reshape), the outermost of them."""
    special = {o for ops in _FAMILY.values() for o in ops}
    fits = [n for n in candidates if (n.op in _FAMILY[kind] if kind in _FAMILY else n.op not in special)]
    return (fits or candidates or [None])[-1]


def _line_col(loc: str) -> tuple[int, int] | None:
    m = re.search(r":(\d+):(\d+)$", loc)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _type_text(dtype: str, shape) -> str:
    return f"{_dtype(dtype)}[{', '.join(map(str, shape))}]" if shape else _dtype(dtype)


def _dtype(d: str) -> str:
    return "bool" if d == "i1" else d


def _op_node(op: dict, kernel, names, typed, decisions, plan) -> GraphNode:
    at = _line_col(op["loc"])
    fdsl = _fdsl_node(names.get(at, []), op["kind"]) if at else None
    line = at[0] if at else None
    src = typed.span.file.line(line).strip() if typed is not None and typed.span is not None and line else ""
    what = (f"{fdsl.name} = {fdsl.op}" if fdsl is not None and fdsl.name else (fdsl.op if fdsl is not None else ""))
    kind = {"view": "view", "fill": "fill"}.get(op["kind"], "op")
    lines = (f"%{op['id']} {op['label']}", _type_text(op["dtype"], op["shape"]),
             " · ".join(x for x in (what, f"line {line}" if line else "") if x))
    role = next((o["role"] for g in plan["groups"] if g["kernel"] == kernel for o in g["ops"] if o["id"] == op["id"]),
                None)
    also = [g["kernel"] for g in plan["groups"] if op["id"] in g["recomputed"] and g["kernel"] != kernel]
    touching = [i for i, d in enumerate(decisions) if op["id"] in d["ops"]]
    detail = {"op": op["id"], "title": lines[0], "ir": op["name"], "fdsl": what, "type": lines[1],
              "bytes": bytes_text(op["bytes"]), "loc": op["loc"], "source": src, "role": role,
              "recomputed_in": also, "note": op["note"], "decisions": touching}
    return GraphNode(f"op{op['id']}", kind, lines, kernel, detail)


def _end_node(key: str, typed, report, edge: Edge) -> GraphNode:
    k = int(key[3:])
    if key.startswith("arg"):
        p = typed.param_nodes[k] if typed is not None and k < len(typed.param_nodes) else None
        t = (str(p.type.with_shape(p.type.concrete(report.binding))) if p is not None else "")
        name = p.name if p is not None else key
        lines = (f"in {name}", t, "read from memory")
    else:
        types = list(getattr(report, "output_types", None) or [])
        if not types and typed is not None:
            types = [str(t.with_shape(t.concrete(report.binding))) for t in typed.output_types]
        lines = (f"out {k}", types[k] if k < len(types) else "", "written to memory")
    return GraphNode(key, key[:3], tuple(x for x in lines if x), None,
                {"title": lines[0], "type": lines[1], "bytes": bytes_text(edge.bytes), "decisions": []})


# ---- edges -----------------------------------------------------------------------------------

def _edges(graph: dict, homes: dict, members: dict, nodes: dict, typed, report) -> list[Edge]:
    def real(op: int | None) -> int | None:
        while op is not None and graph[op]["kind"] == "view":
            op = graph[op]["operands"][0][1]
        return op

    def consumers(op: int) -> list[int]:
        out = []
        for u in graph[op]["users"]:
            if u == -1:
                continue
            out += consumers(u) if graph[u]["kind"] == "view" else [u]
        return out

    def kind(src: int | None, dst: int, key: str) -> str:
        p = real(src)
        if p is None:                   # an argument, or a view of one
            return "input"
        if graph[dst]["kind"] == "view":
            readers = consumers(dst)
            return "memory" if any(p not in members.get(homes.get(c), ()) for c in readers) else "onchip"
        return "onchip" if p in members.get(homes.get(dst), ()) else "memory"

    out: dict[tuple[str, str], Edge] = {}
    for op in graph.values():
        dst = f"op{op['id']}"
        if dst not in nodes:
            continue
        reads = [(key, prod, n, "") for key, prod, n, init in op["operands"]
                 if not init or (prod is not None and graph[prod]["kind"] not in ("fill",))]
        reads += [(key, _key_op(key), n, "indirect") for key, n, _ in op["indirect"]]
        for key, prod, n, how in reads:
            if prod is None and not key.startswith("arg"):
                continue                    # constants, empty tensors
            src = f"op{prod}" if prod is not None else key.split(":")[0]
            if src not in nodes and not src.startswith("arg"):
                continue
            e = out.get((src, dst))
            if e is None:
                out[(src, dst)] = Edge(src, dst, n, how or kind(prod, op["id"], key), key)
    for k, op in enumerate(_returned(graph, typed, report)):
        out[(f"op{op}", f"out{k}")] = Edge(f"op{op}", f"out{k}", graph[op]["bytes"], "output", f"%{op}:0")
    return list(out.values())


def _key_op(key: str) -> int | None:
    m = re.fullmatch(r"%(\d+):\d+", key)
    return int(m.group(1)) if m else None


def _returned(graph: dict, typed, report) -> list[int]:
    """The ops whose results the chain returns, in the order of its outputs where the typed chain
    says it (an op's location is its statement's), else in program order."""
    ops = [o["id"] for o in graph.values() if -1 in o["users"]]
    n = len(getattr(report, "output_types", None) or ()) or len(ops)
    if typed is None or len(typed.outputs) != len(ops):
        return ops[:n] if n <= len(ops) else ops
    at = {}
    for k, i in enumerate(typed.outputs):
        s = typed.node(i).span
        if s is not None:
            at.setdefault((s.line, s.col), k)
    ranked = sorted(ops, key=lambda o: (at.get(_line_col(graph[o]["loc"]) or (0, 0), len(ops)), o))
    return ranked


# ---- kernels ---------------------------------------------------------------------------------

def _kernel(g: dict, plan: dict, decisions: list[dict], report, emitted: str | None) -> dict:
    k = g["kernel"]
    launches = [r.as_dict() if hasattr(r, "as_dict") else r
                for r in (getattr(report, "kernel_report", None) or []) if _group(r) == k]
    sources = {x["kernel"]: launch_source(emitted, x["kernel"]) for x in launches} if emitted else {}
    return {"id": k, "template": g.get("template", ""), "root": g["root"], "tiles": tiles_text(g),
            "cost": cost_line(g["cost"]) if g.get("cost") else "", "raw_cost": g.get("cost"),
            "ops": [o["id"] for o in g["ops"] if o["role"] != "init"],
            "roles": {str(o["id"]): o["role"] for o in g["ops"]}, "recomputed": g["recomputed"],
            "candidates": g.get("candidates", []),
            "decisions": [i for i, d in enumerate(decisions) if k in d["kernels"]],
            "launches": launches, "sources": {n: s for n, s in sources.items() if s}}


def _group(r) -> int | None:
    return r.get("group") if isinstance(r, dict) else getattr(r, "group", None)


def launch_source(module: str | None, name: str) -> str | None:
    """The source of the CUDA kernel `name` (k0, k1...) in an emitted module: its comment line,
    decorator and function, up to the next top-level statement."""
    if not module:
        return None
    lines = module.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"def {name}(")), None)
    if start is None:
        return None
    first = start
    while first > 0 and (lines[first - 1].startswith("@") or lines[first - 1].startswith(f"# {name}:")):
        first -= 1
    end = start + 1
    while end < len(lines) and (not lines[end] or lines[end][0] in " \t"):
        end += 1
    return "\n".join(lines[first:end]).rstrip() + "\n"
