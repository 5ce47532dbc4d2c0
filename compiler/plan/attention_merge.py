"""Attention kernels in the plan: the kernels an attention pattern spans (plan/attention.py)
merged into one online-softmax kernel when the model predicts it faster than they are
(docs/ARCHITECTURE.md, "plan"; "Attention kernels").
"""
from __future__ import annotations

from .analysis import ChainInfo
from .attention import Mismatch, NotAttention, attention_kernel, find_attention
from .decisions import Decision, KernelNames
from .describe import bytes_text, time_text
from .attention_mma import mma_attention_error
from .templates import AttentionConfig
from .tilechoice import TileChooser
from ..dynamic import taken_at_run_time


def merge_attention(info: ChainInfo, chooser: TileChooser, members_list: list[set[int]], names: KernelNames,
                    decisions: list[Decision], dynamic: tuple[str, ...] = (),
                    run_time_loops: dict[int, frozenset[int]] | None = None) -> list[set[int]]:
    """Merge the kernels an attention pattern spans (plan/attention.py) into one online-softmax
    kernel when the model predicts it faster than the kernels the greedy planner made. Not over
    queries, keys or a head dim taken at run time (`run_time_loops`): the template is laid out
    for static ones (a run-time batch is fine)."""
    for op in reversed(info.ops):
        if op.kind != "contraction":
            continue
        a = find_attention(info, op.id)
        if isinstance(a, NotAttention):
            if a.kind is not Mismatch.UNLIKE:         # not the pattern at all: nothing worth a line
                decisions.append(Decision("not attention", f"%{op.id} {op.label}", str(a), (op.id,)))
            continue
        if (run_time_loops or {}).get(a.scores, frozenset()) & {a.q_loop, a.k_loop, a.d_loop}:
            decisions.append(Decision("not attention", f"%{a.scores}..%{a.out}", "the online-softmax template is laid "
                                      f"out for static queries, keys and head dims, and {taken_at_run_time(dynamic)}",
                                      a.ops))
            continue
        touched, union = _spanned(info, chooser.target, members_list, a)
        kernel = attention_kernel(info, union, chooser.target)
        peeled: dict[int, list[set[int]]] = {}
        if isinstance(kernel, NotAttention):
            # a reduction the greedy planner fused into a kernel it spans that reads nothing
            # that kernel computes (a split projection's combine, transforms/split_reductions.py:
            # K's, fused into the scores' kernel) becomes a kernel of its own again, just before
            # the one it left; the model weighs the two together against the kernels apart
            peeled = _combines(info, members_list, touched, a)
            if peeled:
                kept = [_without(info, m, peeled[k]) if k in peeled else m for k, m in enumerate(members_list)]
                t2, u2 = _spanned(info, chooser.target, kept, a)
                k2 = attention_kernel(info, u2, chooser.target)
                if isinstance(k2, NotAttention):
                    peeled = {}
                else:
                    touched, union, kernel = t2, u2, k2
        tail: set[int] = set()
        if isinstance(kernel, NotAttention) and not peeled and chooser.target == "cpu":
            # the cpu template writes each output at its own element: an epilogue reading the
            # output elsewhere (the head merge's permute before the output projection) becomes a
            # kernel of its own right after it, weighed with it against the kernels apart
            tail, kept = _tail(info, members_list, touched, a)
            if tail:
                t2, u2 = _spanned(info, chooser.target, kept, a)
                k2 = attention_kernel(info, u2, chooser.target)
                if isinstance(k2, NotAttention):
                    tail = set()
                else:
                    touched, union, kernel = t2, u2, k2
        where = f"%{a.scores}..%{a.out}"
        if isinstance(kernel, NotAttention):
            decisions.append(Decision("not attention", where, str(kernel), a.ops))
            continue
        choice = chooser.best(frozenset(union))
        if not isinstance(choice.tiling.config, AttentionConfig):
            decisions.append(Decision("not attention", where, f"no tile fits the device's shared memory "
                                      f"(head dims {a.d} and {a.dv})", a.ops))
            continue
        apart = sum(chooser.best(frozenset(members_list[k])).cost.time_s for k in set(touched) | set(peeled))
        fused = choice.cost.time_s + sum(chooser.best(frozenset(p)).cost.time_s for ps in peeled.values() for p in ps)
        if tail:
            fused += chooser.best(frozenset(tail)).cost.time_s
        bq, bkv = choice.tiling.config.block_q, choice.tiling.config.block_kv
        score = info.op(a.scores).result_bytes
        n_apart = len(set(touched) | set(peeled))
        fma = ""
        if chooser.target == "gpu" and not choice.tiling.config.mma and \
                {info.op(a.scores).operand_dtypes[0]} <= {"f16", "bf16"}:
            why = mma_attention_error(info, kernel, None, chooser.hw) or "the FMA kernel is predicted faster"
            fma = f" (on FMAs, not tensor cores: {why})"
        if fused >= apart:
            decisions.append(Decision("not attention", where, f"predicted {time_text(fused)} as one online-softmax "
                                      f"kernel{fma} against {time_text(apart)} in {n_apart} kernels", a.ops,
                                      numbers=(("fused_s", fused), ("apart_s", apart))))
            continue
        alone = [f"%{r} {info.op(r).label}" for ps in peeled.values() for p in ps for r in sorted(p)
                 if info.op(r).kind == "reduction"]
        also = "" if not alone else (f", {alone[0]} as a kernel of its own before it" if len(alone) == 1 else
                                     f", {', '.join(alone)} as kernels of their own before it")
        if tail:
            also += (f", {', '.join(f'%{r} {info.op(r).label}' for r in sorted(tail) if info.op(r).kind != 'fill')}"
                     " a kernel of its own after it (the cpu template writes each output at its own element)")
        mma = choice.tiling.config.mma
        if mma:
            also += f", on {mma} tensor cores (mma.sync m16n8k16, priced at mma.sync's ceiling)"
        elif fma:
            also += fma.replace(" (", ", ", 1)[:-1]
        decisions.append(Decision("attention", f"{where} as one online-softmax kernel ({bq} queries per block, keys "
                                  f"in steps of {bkv}; the {bytes_text(score)} of scores never reach memory){also}",
                                  f"predicted {time_text(fused)} against {time_text(apart)} in {n_apart} kernels",
                                  a.ops, numbers=(("fused_s", fused), ("apart_s", apart), ("scores_bytes", score))))
        if peeled:
            members_list, touched = _peel(info, members_list, peeled, touched, names)
        first = min(touched)
        for k in sorted(touched, reverse=True):     # all after `first`: its position stays
            if k != first:
                names.merged(k, first)
        members_list = [union if k == first else m for k, m in enumerate(members_list) if k == first or k not in touched]
        if tail:        # after it in program order: the position before (the union's stays `first`)
            names.inserted(first)
            members_list.insert(first, tail)
    return members_list


def _tail(info: ChainInfo, members_list: list[set[int]], touched: list[int], a) -> tuple[set[int], list[set[int]]]:
    """The epilogue after attention `a`'s output in the kernels it spans, with the fills it reads,
    and the kernels without it ({} and the list as it is when there is none)."""
    after = {x for k in touched for x in members_list[k]
             if x > a.out and x not in a.ops and info.op(x).kind != "fill"}
    if not after:
        return set(), members_list
    fills = {p for x in after for p in info.op(x).producers if p is not None and info.op(p).kind == "fill"}
    tail = after | fills
    kept = [_without(info, m, [tail]) if k in touched else m for k, m in enumerate(members_list)]
    return tail, kept


def _spanned(info: ChainInfo, target: str, members_list: list[set[int]], a) -> tuple[list[int], set[int]]:
    """The kernels attention `a` spans (positions in `members_list`) and the ops they hold."""
    # found by its compute ops: a zero fill CSE shares between layers (each layer's contractions
    # start from the same zeros) would pull in the other layer's kernels (`not two
    # contractions`); each kernel gets its own copy of the fill (tile_and_fuse.py: tag_groups)
    own = {x for x in a.ops if info.op(x).kind != "fill"}
    touched = [k for k, m in enumerate(members_list) if m & own]
    union = set().union(*[members_list[k] for k in touched]) | set(a.ops)
    # kernels of elementwise ops that only feed this one (K's transpose, a scaled Q, a mask
    # computed in the chain): the template evaluates them in its loaders instead
    grew = True
    while grew:
        grew = False
        for k, m in enumerate(members_list):
            if k in touched or not all(info.op(x).kind in ("elementwise", "fill", "view") for x in m):
                continue
            users = [u for x in m for u in info.op(x).users]     # -1 (a result) is in neither
            if all(u in union or u in m for u in users) and any(u in union for u in users):
                touched.append(k)
                union |= m
                grew = True
    return touched, union


def _combines(info: ChainInfo, members_list: list[set[int]], touched: list[int], a) -> dict[int, list[set[int]]]:
    """Per touched kernel, the reductions in it that are not the attention's and read nothing the
    kernel computes (a split reduction's combine: the partials another kernel writes, and its
    init fill), each with its fills: kernels of their own; {} when a touched kernel holds a
    reduction of another form."""
    out: dict[int, list[set[int]]] = {}
    for k in touched:
        m = members_list[k]
        for r in sorted(x for x in m - set(a.ops) if info.op(x).kind == "reduction"):
            inside = {p for p in info.op(r).producers if p is not None and p in m}
            if any(info.op(p).kind != "fill" for p in inside):
                return {}
            out.setdefault(k, []).append({r} | inside)
    return out


def _without(info: ChainInfo, m: set[int], peeled: list[set[int]]) -> set[int]:
    """Kernel `m` less the peeled reductions and the fills no other member of it reads."""
    gone = {x for p in peeled for x in p}
    rest = m - {x for x in gone if info.op(x).kind != "fill"}
    return {x for x in rest if x not in gone or any(u in rest for u in info.op(x).users)}


def _peel(info: ChainInfo, members_list: list[set[int]], peeled: dict[int, list[set[int]]], touched: list[int],
          names: KernelNames) -> tuple[list[set[int]], list[int]]:
    """`members_list` with each peeled set out of its kernel and a kernel of its own just before
    it in program order (the next position: the list is last first); `touched` moved along."""
    out: list[set[int]] = []
    where: dict[int, int] = {}
    for k, m in enumerate(members_list):
        where[k] = len(out)
        out.append(_without(info, m, peeled[k]) if k in peeled else m)
        for p in peeled.get(k, []):
            names.inserted(len(out))
            out.append(set(p))
    return out, [where[k] for k in touched]
