"""Attention kernels in the plan: the kernels an attention pattern spans (plan/attention.py)
merged into one online-softmax kernel when the model predicts it faster than they are
(docs/ARCHITECTURE.md, "plan"; "Attention kernels").
"""
from __future__ import annotations

from .analysis import ChainInfo
from .attention import Mismatch, NotAttention, attention_kernel, find_attention
from .decisions import Decision, KernelNames
from .describe import bytes_text, time_text
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
        # the kernels it spans, found by its compute ops on the gpu: a zero fill CSE shares
        # between layers (each layer's contractions start from the same zeros) would pull in
        # the other layer's kernels (`not two contractions`). The cpu template does not take a
        # shared fill yet (docs/FUSION.md, Not yet), so there a fill still counts
        own = {x for x in a.ops if info.op(x).kind != "fill" or chooser.target == "cpu"}
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
        kernel = attention_kernel(info, union, chooser.target)
        where = f"%{a.scores}..%{a.out}"
        if isinstance(kernel, NotAttention):
            decisions.append(Decision("not attention", where, str(kernel), a.ops))
            continue
        choice = chooser.best(frozenset(union))
        if not isinstance(choice.tiling.config, AttentionConfig):
            decisions.append(Decision("not attention", where, f"no tile fits the device's shared memory "
                                      f"(head dims {a.d} and {a.dv})", a.ops))
            continue
        apart = sum(chooser.best(frozenset(members_list[k])).cost.time_s for k in touched)
        fused = choice.cost.time_s
        bq, bkv = choice.tiling.config.block_q, choice.tiling.config.block_kv
        score = info.op(a.scores).result_bytes
        if fused >= apart:
            decisions.append(Decision("not attention", where, f"predicted {time_text(fused)} as one online-softmax "
                                      f"kernel against {time_text(apart)} in {len(touched)} kernels", a.ops,
                                      numbers=(("fused_s", fused), ("apart_s", apart))))
            continue
        decisions.append(Decision("attention", f"{where} as one online-softmax kernel ({bq} queries per block, keys "
                                  f"in steps of {bkv}; the {bytes_text(score)} of scores never reach memory)",
                                  f"predicted {time_text(fused)} against {time_text(apart)} in {len(touched)} kernels",
                                  a.ops, numbers=(("fused_s", fused), ("apart_s", apart), ("scores_bytes", score))))
        first = min(touched)
        for k in sorted(touched, reverse=True):     # all after `first`: its position stays
            if k != first:
                names.merged(k, first)
        members_list = [union if k == first else m for k, m in enumerate(members_list) if k == first or k not in touched]
    return members_list

