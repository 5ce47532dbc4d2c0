"""Shared-memory bank conflicts of a kernel, computed from its emitted Python (`--emit kernels`),
without running it: `bank_conflicts(source, kernel, block)`.

Every subscript of an array made by `cuda.shared.array(shape, dtype)` in the kernel is an access
site. Its index is evaluated for the 32 lanes of warp 0 of block 0: the kernel's statements are
walked once in order, each `name = expr` evaluated per lane (threadIdx from the launch's block
shape, x fastest; blockIdx 0; blockDim the block shape), a `for v in range(a, ...)` loop's
variable at its first value a and its body walked once, both arms of an `if` walked (guards are
ignored: all 32 lanes take part). A name that cannot be evaluated this way (a value loaded from
memory, a call other than min/max/abs/int) makes the site unknown: ways None, with the reason.

The index flattens with the array's shape (row-major) to an element, times the itemsize to a
byte address. Banks are 32 of 4 bytes; the ways of a request are the most distinct 4-byte words
any one bank must serve (a word read by several lanes is one broadcast; 1: conflict-free). An
8- or 16-byte element is served in 2 or 4 phases of 16 or 8 lanes (the hardware's rule for
64- and 128-bit accesses); the ways are the worst phase's.

Consecutive sites of one array and kind whose lanes read 2 or 4 consecutive elements, the first
at a multiple of 8 or 16 bytes from the array's start for every lane (a register run of the
contraction template, `Ns[kk, tx4]` .. `Ns[kk, tx4 + 3]`), are one 8- or 16-byte access, as the
compiler vectorizes them (LLVM may raise the alignment of a shared array, a global it defines, to
16 bytes; the SASS shows `LDS.128`): their ways are those of the wide access, `width` its bytes.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, replace

import numpy as np

LANES = 32
BANKS = 32
_CP_ASYNC16H = ("_cp_async16h", "_cp_async16hs")   # 16-byte cp.async into a shared array (emit/cp_async.py)
_ITEMSIZE = {"float32": 4, "int32": 4, "uint32": 4, "float64": 8, "int64": 8, "uint64": 8, "float16": 2,
             "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool_": 1, "boolean": 1}


@dataclass(frozen=True)
class BankAccess:
    """One shared-memory access site: its line in the emitted module, the expression, load or
    store, the array, and the bank-conflict ways of warp 0's request (None: not evaluated, `why`)."""
    line: int
    expr: str
    kind: str
    array: str
    ways: int | None
    why: str | None = None
    width: int | None = None        # bytes per lane of the access (a run of several sites: 8 or 16)


class Unknown(Exception):
    pass


def ways(addresses: np.ndarray, itemsize: int) -> int:
    """The bank-conflict ways of one warp request: `addresses` the byte address of each lane's
    element (see the module's docstring)."""
    per_phase = max(1, LANES * 4 // max(4, itemsize))       # 32 lanes (<= 4 bytes), 16 (8), 8 (16)
    worst = 1
    for p in range(0, len(addresses), per_phase):
        words = set()
        for a in addresses[p:p + per_phase]:
            first, last = int(a) // 4, (int(a) + itemsize - 1) // 4
            words.update(range(first, last + 1))
        by_bank: dict[int, int] = {}
        for w in words:
            by_bank[w % BANKS] = by_bank.get(w % BANKS, 0) + 1
        worst = max(worst, max(by_bank.values(), default=1))
    return worst


def bank_conflicts(source: str, kernel: str, block: tuple[int, ...]) -> tuple[BankAccess, ...]:
    """The shared-memory access sites of `kernel` (a function of the module `source`) for a
    launch of block shape `block`, in line order."""
    tree = ast.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        return ()
    walker = _Walker(tuple(block) + (1,) * (3 - len(block)))
    for stmt in tree.body:              # the module's integer constants
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Constant) and type(stmt.value.value) is int:
            walker.env[stmt.targets[0].id] = stmt.value.value
    walker.block(fn.body)
    return tuple(sorted(_runs(walker.sites, walker.flats), key=lambda s: (s.line, s.expr)))


def _runs(sites: list[BankAccess], flats: list) -> list[BankAccess]:
    """`sites` (in the walk's order) with each vectorizable run (module docstring) as one wide
    access; `flats` holds each site's (per-lane element index, itemsize), or None."""
    out = list(sites)
    i = 0
    while i < len(sites):
        step = 1
        if flats[i] is not None:
            flat, itemsize = flats[i]
            for width in (16, 8):
                n = width // itemsize
                if n < 2 or i + n > len(sites) or np.any(flat * itemsize % width):
                    continue
                if all(flats[i + r] is not None and sites[i + r].array == sites[i].array
                       and sites[i + r].kind == sites[i].kind and np.array_equal(flats[i + r][0], flat + r)
                       for r in range(1, n)):
                    wide = ways(flat * itemsize, width)
                    for r in range(n):
                        out[i + r] = replace(sites[i + r], ways=wide, width=width)
                    step = n
                    break
        i += step
    return out


class _Walker:
    def __init__(self, block: tuple[int, int, int]):
        lane = np.arange(LANES)
        bx, by, _ = block
        self.tid = {"x": lane % bx, "y": (lane // bx) % by, "z": lane // (bx * by)}
        self.dims = dict(zip("xyz", block))
        self.env: dict[str, object] = {}
        self.shared: dict[str, tuple[tuple[int, ...], int]] = {}
        self.sites: list[BankAccess] = []
        self.flats: list = []               # per site: (its lanes' element indices, itemsize) or None
        self.seen: set[int] = set()
        self.bases: dict[str, str] = {}     # a name holding `_smem_base(array)`: the array's byte 0

    # statements
    def block(self, body):
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, s):
        if isinstance(s, ast.Assign):
            self.find(s.value)
            for t in s.targets:
                self.find(t, store=True)
            if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                name = s.targets[0].id
                if (arr := self.shared_array(s.value)) is not None:
                    self.shared[name] = arr
                    self.env.pop(name, None)
                elif (base := self.smem_base(s.value)) is not None:
                    self.bases[name] = base          # byte addresses into `base` from here
                    self.env[name] = 0
                else:
                    self.bind(name, s.value)
                    found = {self.bases[x.id] for x in ast.walk(s.value) if isinstance(x, ast.Name) and x.id in self.bases}
                    if len(found) == 1:              # an address computed from one
                        self.bases[name] = found.pop()
            elif len(s.targets) == 1 and isinstance(s.targets[0], ast.Tuple):
                values = s.value.elts if isinstance(s.value, ast.Tuple) else [None] * len(s.targets[0].elts)
                for t, v in zip(s.targets[0].elts, values):
                    if isinstance(t, ast.Name):
                        self.bind(t.id, v)
        elif isinstance(s, ast.AugAssign):
            self.find(s.value)
            self.find(s.target, store=True)
            if isinstance(s.target, ast.Name):
                self.bind(s.target.id, ast.BinOp(ast.Name(s.target.id, ast.Load()), s.op, s.value))
        elif isinstance(s, ast.For):
            self.find(s.iter)
            if isinstance(s.target, ast.Name):
                it = s.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args:
                    self.bind(s.target.id, it.args[0] if len(it.args) > 1 else ast.Constant(0))
                else:
                    self.env[s.target.id] = Unknown(f"{s.target.id} iterates over {ast.unparse(it)}")
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.If, ast.While)):
            self.find(s.test)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, ast.With):
            self.block(s.body)
        else:
            self.find(s)

    def bind(self, name, value):
        if value is None:
            self.env[name] = Unknown(f"{name} is unpacked from a call")
            return
        try:
            self.env[name] = self.eval(value)
        except Unknown as e:
            self.env[name] = e

    def smem_base(self, node):
        """The shared array X of a `_smem_base(X)` in `node` (emit/mma.py), else None."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "_smem_base" and n.args \
                    and isinstance(n.args[0], ast.Name) and n.args[0].id in self.shared:
                return n.args[0].id
        return None

    def shared_array(self, node):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "view"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in self.shared and node.args):
            shape, itemsize = self.shared[node.func.value.id]       # X.view(dtype): the same bytes
            new = _ITEMSIZE.get(ast.unparse(node.args[0]).split(".")[-1], itemsize)
            return (None if shape is None else (int(np.prod(shape)) * itemsize // new,)), new
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "cuda.shared.array" and len(node.args) >= 2):
            return None
        try:
            shape = self.eval(node.args[0])
            shape = tuple(int(d) for d in (shape if isinstance(shape, tuple) else (shape,)))
        except (Unknown, TypeError):
            return (None, 4)
        dtype = ast.unparse(node.args[1]).split(".")[-1]
        return shape, _ITEMSIZE.get(dtype, 4)

    # access sites
    def find(self, node, store=False):
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and id(n) not in self.seen \
                    and (n.func.id.startswith("_ldsm_x") or n.func.id in _CP_ASYNC16H):
                self.seen.add(id(n))
                self.sites.append(self.wide_site(n))
                self.flats.append(None)
                continue
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.shared:
                if id(n) in self.seen:
                    continue
                self.seen.add(id(n))
                kind = "store" if (store and n is node) or isinstance(n.ctx, ast.Store) else "load"
                site, flat = self.site(n, kind)
                self.sites.append(site)
                self.flats.append(flat)

    def site(self, n: ast.Subscript, kind: str) -> tuple[BankAccess, tuple | None]:
        name, expr = n.value.id, ast.unparse(n)
        shape, itemsize = self.shared[name]
        try:
            if shape is None:
                raise Unknown(f"the shape of {name} is not a constant")
            idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            if len(idx) != len(shape):
                raise Unknown(f"{len(idx)} indices of a {len(shape)}-d array")
            flat = np.zeros(LANES, dtype=np.int64)
            for i, d in zip(idx, shape):
                v = self.eval(i)
                if isinstance(v, tuple) or isinstance(v, float) or (isinstance(v, np.ndarray) and v.dtype.kind == "f"):
                    raise Unknown(f"{ast.unparse(i)} is not an integer")
                flat = flat * d + np.asarray(v, dtype=np.int64)
            return BankAccess(n.lineno, expr, kind, name, ways(flat * itemsize, itemsize), width=itemsize), (flat, itemsize)
        except Unknown as e:
            return BankAccess(n.lineno, expr, kind, name, None, str(e)), None

    def wide_site(self, n: ast.Call) -> BankAccess:
        """An ldmatrix (`_ldsm_x4(address)`: lanes 8 j .. 8 j + 7 give matrix j's 8 rows of 16
        bytes, one phase per matrix; x2: lanes 0-15) or a 16-byte cp.async into a shared array
        (`_cp_async16h(H, (i,), ...)`, `_cp_async16hs(H, (i,), address, ...)`: a 16-byte store
        per lane at H[i], the address naming the same element)."""
        expr = ast.unparse(n)
        try:
            if n.func.id in _CP_ASYNC16H:
                name = n.args[0].id if isinstance(n.args[0], ast.Name) else ""
                if name not in self.shared or self.shared[name][0] is None:
                    raise Unknown(f"{ast.unparse(n.args[0])} is not a shared array of known shape")
                idx = self.eval(n.args[1])
                if not isinstance(idx, tuple) or len(idx) != 1:
                    raise Unknown("a cp.async destination index that is not 1-d")
                addr = np.asarray(idx[0], dtype=np.int64) * self.shared[name][1] + np.zeros(LANES, dtype=np.int64)
                return BankAccess(n.lineno, expr, "store", name, ways(addr, 16), width=16)
            lanes = 8 * int(n.func.id[len("_ldsm_x")])
            names = {b for b in self.bases if any(isinstance(x, ast.Name) and x.id == b for x in ast.walk(n.args[0]))}
            if len(names) != 1:
                raise Unknown(f"{ast.unparse(n.args[0])} is not an address from _smem_base")
            addr = np.asarray(self.eval(n.args[0]), dtype=np.int64) + np.zeros(LANES, dtype=np.int64)
            return BankAccess(n.lineno, expr, "load", self.bases[names.pop()], ways(addr[:lanes], 16), width=16)
        except Unknown as e:
            return BankAccess(n.lineno, expr, "load" if n.func.id not in _CP_ASYNC16H else "store", "", None, str(e))

    # expressions: an int, a per-lane int array, or a tuple
    def eval(self, e):
        if isinstance(e, ast.Constant):
            if isinstance(e.value, bool) or not isinstance(e.value, (int, float)):
                raise Unknown(f"{ast.unparse(e)} is not a number")
            return e.value
        if isinstance(e, ast.Name):
            v = self.env.get(e.id)
            if v is None:
                raise Unknown(f"{e.id} is not evaluated here")
            if isinstance(v, Unknown):
                raise v
            return v
        if isinstance(e, ast.Tuple):
            return tuple(self.eval(x) for x in e.elts)
        if isinstance(e, ast.Attribute):
            text = ast.unparse(e)
            for prefix, table in (("cuda.threadIdx.", self.tid), ("cuda.blockDim.", self.dims)):
                if text.startswith(prefix) and text[len(prefix):] in table:
                    return table[text[len(prefix):]]
            if text.startswith("cuda.blockIdx."):
                return 0
            raise Unknown(f"{text} is not evaluated here")
        if isinstance(e, ast.BinOp):
            a, b = self.eval(e.left), self.eval(e.right)
            op = type(e.op)
            fns = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide,
                   ast.Mod: np.mod, ast.BitAnd: np.bitwise_and, ast.BitOr: np.bitwise_or, ast.BitXor: np.bitwise_xor,
                   ast.LShift: np.left_shift, ast.RShift: np.right_shift}
            if op not in fns or isinstance(a, tuple) or isinstance(b, tuple):
                raise Unknown(f"{ast.unparse(e)} is not evaluated here")
            if op in (ast.FloorDiv, ast.Mod) and np.any(np.asarray(b) == 0):
                raise Unknown(f"{ast.unparse(e)} divides by zero")
            return fns[op](a, b)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            v = self.eval(e.operand)
            return -v if isinstance(e.op, ast.USub) else v
        if isinstance(e, ast.IfExp):
            c, a, b = self.cond(e.test), self.eval(e.body), self.eval(e.orelse)
            return np.where(c, a, b)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("min", "max", "abs", "int") \
                and not e.keywords:
            args = [self.eval(a) for a in e.args]
            if e.func.id == "abs":
                return np.abs(args[0])
            if e.func.id == "int":
                return args[0]
            out = args[0]
            for a in args[1:]:
                out = (np.minimum if e.func.id == "min" else np.maximum)(out, a)
            return out
        raise Unknown(f"{ast.unparse(e)} is not evaluated here")

    def cond(self, e):
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            a, b = self.eval(e.left), self.eval(e.comparators[0])
            fns = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
                   ast.Eq: np.equal, ast.NotEq: np.not_equal}
            if type(e.ops[0]) in fns:
                return fns[type(e.ops[0])](a, b)
        raise Unknown(f"{ast.unparse(e)} is not evaluated here")
