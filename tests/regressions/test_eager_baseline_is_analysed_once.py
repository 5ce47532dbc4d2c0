"""Regression (compile time): every build of a chain re-parsed its printed linalg module and
analysed it again for the plan's eager baseline (`with_eager_transfers`, superlinear in the
chain's length: ~40% of a 500-op chain's compile), although the fused and unfused builds,
autotuning's candidates and a fallback's plans all lower to the same text. The pipeline now does
it once per linalg text; the plans are the same as before."""
import fusec
from fusec.compiler import pipeline
from fusec.compiler.options import CompileOptions

SOURCE = """chain c(x: f32[16, 32], w: f32[32, 32]) -> f32[16, 32] {
    h = tanh(x @ w) * 0.5 + x
    return h - max(h, axis=-1, keepdims=true)
}
"""


def _counted(monkeypatch) -> list:
    calls = []
    real = pipeline.with_eager_transfers

    def counting(plan, text, context):
        calls.append(plan.chain)
        return real(plan, text, context)
    monkeypatch.setattr(pipeline, "with_eager_transfers", counting)
    monkeypatch.setattr(pipeline, "_EAGER", {})
    return calls


def test_the_fused_and_unfused_builds_share_one_eager_analysis(monkeypatch):
    chain = fusec.check(SOURCE).chains[0]
    calls = _counted(monkeypatch)
    built = pipeline.build_chain(chain, {}, CompileOptions(target="gpu"))
    assert set(built.builds) == {"fused", "unfused"}
    assert calls == ["c"]
    for st in built.builds.values():
        assert dict(st.plan.transfers)["eager"] > 0
    # the same plans as computed afresh for each build
    for name, st in built.builds.items():
        monkeypatch.setattr(pipeline, "_EAGER", {})
        again = pipeline.compile_typed(chain, {}, options=CompileOptions(target="gpu", fuse=name == "fused"),
                                       until="plan")
        assert again.plan.transfers == st.plan.transfers
        assert again.texts["plan"] == st.texts["plan"]
