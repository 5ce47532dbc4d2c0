"""The one printer of a fusion plan, from its summary (`FusionPlan.summary()`, plain data), so a
plan prints the same from the compiler, from a report and from an artifact (no MLIR needed).

    format_plan(summary)                 --emit plan: kernels, each op's role and place, the
                                         model's line per kernel, the totals, every decision
    format_plan(summary, explain=True)   --explain: per kernel its tiles and candidates, FLOPs,
                                         bytes, on-chip intermediates, occupancy, the bound and
                                         the time split; then decisions and rejected fusions
"""
from __future__ import annotations


def format_plan(summary: dict, *, explain: bool = False, binding: dict[str, int] | None = None) -> str:
    return _explain(summary, binding) if explain else _plan(summary)


def _plan(p: dict) -> str:
    k = p["kernels"]
    lines = [f"plan {p['chain']} (target {p['target']}, {'fused' if p['fused'] else 'unfused'}): "
             f"{p['ops']} compute ops -> {k} kernel{'s' if k != 1 else ''}"]
    for g in p["groups"]:
        root = next(o for o in g["ops"] if o["role"] == "root")
        shape = "x".join(map(str, g["loops"])) or "scalar"
        lines.append(f"  kernel {g['kernel']}: root %{g['root']} {root['label']} over {shape}; {tiles_text(g)}")
        for o in g["ops"]:
            lines.append(f"    %{o['id']:<3} {o['label']:<34} {o['role']:<9} {o['loc']}")
        if "cost" in g:
            lines.append("    model: " + cost_line(g["cost"]))
    if p.get("dynamic"):
        lines.append("  " + dynamic_text(p["dynamic"]))
    m = p.get("model")
    if m:
        lines.append(f"  predicted on {m['hardware']}: {time_text(m['predicted_s'])} in {m['launches']} "
                     f"launch{'es' if m['launches'] != 1 else ''}; unfused {time_text(m['unfused_predicted_s'])} "
                     f"in {m['unfused_launches']}"
                     + (f"; speedup {m['predicted_speedup']:.2f}x" if p["fused"] else ""))
    if p["decisions"]:
        lines.append("  decisions:")
        lines += [f"    {d}" for d in p["decisions"]]
    return "\n".join(lines)


def dynamic_text(dynamic: dict) -> str:
    """What a shape-polymorphic build takes at run time and what it was planned for."""
    from fusec.compiler.dynamic import size_class
    parts = [f"{s} (tiles chosen for the size class {s} in {size_class(n)}, planned at {s} = {n})"
             for s, n in dynamic.items()]
    return "dynamic: the kernels read " + "; ".join(parts) + " from the inputs at run time; any extent runs"


def tiles_text(g: dict) -> str:
    """A kernel's tiles in words, from its summary: serial, block and thread tiles, a row
    kernel's row threads, or a contraction kernel's K step and register tile."""
    if g.get("scan"):
        if g["scan"] == 1:
            return "scan: a prange over the rows, each walked in order"
        if g.get("scan_axis") == len(g["loops"]) - 2:
            return f"scan: a block of {g['scan']} threads per row, the row in chunks of {g['scan']}"
        return f"scan: a thread per row, each walked in order, blocks of {g['scan']} side by side"
    if g["serial"]:
        return "serial (one thread)"
    if g.get("attention"):
        bq, bkv = g["attention"]
        threads = "x".join(map(str, g["threads"])) if g.get("threads") and len(g["threads"]) > 1 else ""
        on = f", {threads} threads" if threads else ""
        if g.get("tensor_cores"):
            on += (f", {g['tensor_cores']} tensor cores (mma.sync m16n8k16: 4 warps of 16 query rows, P in "
                   "registers)")
        return (f"attention (online softmax): {bq} queries per block, keys in steps of {bkv}{on}; "
                f"the scores never reach memory")
    text = f"block tile {g['block_tiles']}"
    threads = "x".join(map(str, g["threads"]))
    if g.get("gemm"):
        bk, tm, tn = g["gemm"]
        tc = f", {g['tensor_cores']} tensor cores (mma.sync m16n8k16)" if g.get("tensor_cores") else ""
        tc += ", double-buffered" if g.get("double_buffered") else ""
        tc += f", {g['stages']} cp.async stages" if g.get("stages") else ""
        return f"{text}; tiled contraction: K step {bk}, {tm}x{tn} outputs per thread, {threads} threads{tc}"
    if g.get("row_threads") and g.get("row_columns"):
        return (f"{text}; column kernel: {g['row_threads']} threads per column (threads y), "
                f"{g['threads'][-2] if len(g['threads']) > 1 else 1} columns per block (threads x)")
    if g.get("row_threads"):
        runs = (f" in runs of {g['row_runs']} (blocked-cyclic: 16-byte loads and stores where aligned)"
                if g.get("row_runs") else "")
        return f"{text}; row kernel: {g['row_threads']} threads per row{runs}, {threads} threads"
    if any(g["thread_tiles"]):
        return f"{text}, thread tile {g['thread_tiles']}, threads {g['threads']}"
    return text


def cost_line(c: dict) -> str:
    """One kernel's model in a line: FLOPs, bytes unfused -> fused, intensity, bound, time."""
    extra = []
    if c["recompute_flops"]:
        extra.append(f"{flops_text(c['recompute_flops'])} recomputed")
    if c["intermediates"]:
        extra.append(f"{c['intermediates']} intermediate{'s' if c['intermediates'] != 1 else ''} on chip")
    if c["bytes_spilled"]:
        extra.append(f"{bytes_text(c['bytes_spilled'])} spilled")
    return (f"{flops_text(c['flops'])}, {bytes_text(c['bytes_unfused'])} -> {bytes_text(c['bytes'])}, "
            f"{c['intensity']:.2f} FLOP/B, {c['bound']}-bound, {time_text(c['time_s'])}"
            + (f" ({', '.join(extra)})" if extra else ""))


def _explain(plan: dict, binding: dict[str, int] | None) -> str:
    bound = ", ".join(f"{k}={v}" for k, v in (binding or {}).items())
    model = plan.get("model", {})
    lines = [f"explain {plan['chain']}{f' [{bound}]' if bound else ''} on {plan['target']}, "
             f"hardware {model.get('hardware', '?')}: {plan['ops']} ops -> {plan['kernels']} "
             f"kernel{'s' if plan['kernels'] != 1 else ''}"]
    if plan.get("dynamic"):
        lines.append("  " + dynamic_text(plan["dynamic"]))
    for g in plan["groups"]:
        c = g.get("cost")
        ops = ", ".join(f"%{o['id']} {o['label']}" + (" [root]" if o["role"] == "root" else "")
                        for o in g["ops"] if o["role"] not in ("init", "pad"))
        lines.append(f"  kernel {g['kernel']}: {ops}")
        alts = ", ".join(f"{a['block_tiles']}{'/' + str(a['thread_tiles']) if any(a['thread_tiles']) else ''}"
                         f"{'/gemm ' + str(a['gemm']) if a.get('gemm') else ''} {ms(a['predicted_s'])}"
                         for a in g.get("candidates", [])[:3])
        lines.append(f"    tiles: {tiles_text(g)}" + (f"; best candidates: {alts}" if alts else ""))
        if not c:
            continue
        lines.append(f"    FLOPs {_num(c['flops'])}" + (f" ({_num(c['recompute_flops'])} recomputed)"
                                                       if c["recompute_flops"] else "")
                     + f"; global bytes {_num(c['bytes_unfused'])}B unfused -> {_num(c['bytes'])}B fused"
                     + (f" (+{_num(c['bytes_cached'])}B re-read from cache)" if c["bytes_cached"] else "")
                     + f"; intensity {c['intensity']:.2f} FLOP/B")
        lines.append(f"    on chip: {c['intermediates']} intermediate{'s' if c['intermediates'] != 1 else ''}"
                     f" ({_num(c['onchip_bytes'])}B per {'thread' if plan['target'] == 'gpu' else 'tile'})"
                     + (f", {_num(c['bytes_spilled'])}B spilled" if c["bytes_spilled"] else "")
                     + f"; occupancy {c['occupancy']:.0%}; launches {c['kernels_unfused']} -> 1")
        lines.append(f"    {c['bound']}-bound: predicted {ms(c['time_s'])} (compute {ms(c['compute_s'])}, "
                     f"memory {ms(c['memory_s'])}, launch {ms(c['launch_s'])}"
                     + (f", allocation {ms(c['alloc_s'])}" if c["alloc_s"] else "") + ")")
    if model:
        lines.append(f"  predicted: fused {ms(model['predicted_s'])} in {model['launches']} launch"
                     f"{'es' if model['launches'] != 1 else ''}, unfused {ms(model['unfused_predicted_s'])} in "
                     f"{model['unfused_launches']}; speedup {model['predicted_speedup']:.2f}x")
        if model.get("big_transfers"):
            lines.append("  " + transfers_line(model["big_transfers"]))
    rejected = [d for d in plan.get("decisions", []) if d.startswith("not fused")]
    fused = [d for d in plan.get("decisions", []) if not d.startswith("not fused")]
    if fused:
        lines.append("  decisions:")
        lines += [f"    {d}" for d in fused]
    lines.append("  rejected fusions:" + ("" if rejected else " none"))
    lines += [f"    {d}" for d in rejected]
    return "\n".join(lines)


def transfers_line(big: dict) -> str:
    """Global reads and writes of intermediate-sized tensors: op by op, unfused build, fused."""
    parts = []
    if "eager" in big:
        parts.append(f"{big['eager']} op by op")
    parts.append(f"{big['unfused']} unfused")
    parts.append(f"{big['fused']} fused")
    base = big.get("eager", big["unfused"])
    cut = f" ({(big['fused'] - base) / base:+.0%})" if base else ""
    return "intermediate-sized global reads/writes: " + ", ".join(parts) + cut


# ---- numbers ---------------------------------------------------------------------------------

def ms(s: float | None) -> str:
    """A time in ms (or us below 0.1 ms)."""
    if s is None:
        return "?"
    return f"{s * 1e3:.3f} ms" if s >= 1e-4 else f"{s * 1e6:.1f} us"


def _num(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g} "


def flops_text(x: float) -> str:
    for unit, div in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g} FLOP"


def bytes_text(x: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.0f} B"


def time_text(s: float) -> str:
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def signed_time_text(s: float) -> str:
    """A time difference: +1.2 us, -3.4 ms."""
    return ("+" if s >= 0 else "-") + time_text(abs(s))
