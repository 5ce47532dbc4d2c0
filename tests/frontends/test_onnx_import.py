"""The ONNX importer end to end: `fusec import` + `fusec OUT.fdsl --inputs OUT.npz --inputs x.npz`
(subprocesses) and `fusec.onnx.load` on a small MLP and a transformer-like block, dynamic dims
at two sizes, and every hostile or unsupported file refused with one line naming the place."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusec
import fusec.onnx as fonnx
from fusec.cli import main
from fusec.errors import UsageError
from fusec.runtime.compare import compare

from onnx_helpers import TP, h, init, model, onnx, ort_run, rand, save, tensor

F = TP.FLOAT
ROOT = Path(__file__).resolve().parents[2]


def mlp():
    nodes = [h.make_node("MatMul", ["x", "w1"], ["h0"]), h.make_node("Add", ["h0", "b1"], ["h1"]),
             h.make_node("Relu", ["h1"], ["h2"]), h.make_node("Gemm", ["h2", "w2", "b2"], ["y"], transB=1)]
    return model(nodes, [tensor("x", F, ["batch", 16])], [tensor("y", F, ["batch", 8])],
                 [init("w1", rand((16, 32), 1)), init("b1", rand((32,), 2)), init("w2", rand((8, 32), 3)),
                  init("b2", rand((8,), 4))], name="mlp")


def block():
    """A transformer-like block: LayerNormalization, attention with 2 heads (MatMul, Add,
    Reshape with copied dims, Transpose, Softmax), and a Gelu MLP, each with a residual Add."""
    d, heads = 16, 2
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))   # noqa: E731
    nodes = [h.make_node("LayerNormalization", ["x", "g1", "be1"], ["ln1"])]
    for p in "qkv":
        nodes += [h.make_node("MatMul", ["ln1", f"w{p}"], [f"{p}0"]), h.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
                  h.make_node("Reshape", [f"{p}1", "split_heads"], [f"{p}2"]),
                  h.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 1, 3])]
    nodes += [h.make_node("Transpose", ["k3"], ["kt"], perm=[0, 1, 3, 2]), h.make_node("MatMul", ["q3", "kt"], ["s0"]),
              h.make_node("Mul", ["s0", "scale"], ["s1"]), h.make_node("Softmax", ["s1"], ["p"]),
              h.make_node("MatMul", ["p", "v3"], ["o0"]), h.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["o1", "merge_heads"], ["o2"]), h.make_node("MatMul", ["o2", "wo"], ["o3"]),
              h.make_node("Add", ["o3", "bo"], ["o4"]), h.make_node("Add", ["x", "o4"], ["r1"]),
              h.make_node("LayerNormalization", ["r1", "g2", "be2"], ["ln2"]),
              h.make_node("MatMul", ["ln2", "w1"], ["f0"]), h.make_node("Add", ["f0", "b1"], ["f1"]),
              h.make_node("Gelu", ["f1"], ["f2"]), h.make_node("MatMul", ["f2", "w2"], ["f3"]),
              h.make_node("Add", ["f3", "b2"], ["f4"]), h.make_node("Add", ["r1", "f4"], ["out"])]
    inits = [init("g1", rand((d,), 1, lo=0.5)), init("be1", rand((d,), 2)), init("g2", rand((d,), 3, lo=0.5)),
             init("be2", rand((d,), 4)), i64("split_heads", [0, 0, heads, d // heads]), i64("merge_heads", [0, 0, d]),
             init("scale", np.float32(1 / np.sqrt(d // heads))), init("wo", rand((d, d), 5, lo=-0.3, hi=0.3)),
             init("bo", rand((d,), 6)), init("w1", rand((d, 4 * d), 7, lo=-0.3, hi=0.3)), init("b1", rand((4 * d,), 8)),
             init("w2", rand((4 * d, d), 9, lo=-0.3, hi=0.3)), init("b2", rand((d,), 10))]
    inits += [init(f"w{p}", rand((d, d), 11 + k, lo=-0.3, hi=0.3)) for k, p in enumerate("qkv")]
    inits += [init(f"b{p}", rand((d,), 21 + k)) for k, p in enumerate("qkv")]
    return model(nodes, [tensor("x", F, ["B", "S", d])], [tensor("out", F, ["B", "S", d])], inits, name="block")


def fusec_cli(*args, cwd):
    env = dict(os.environ, FUSEC_NO_CACHE="1")
    return subprocess.run([sys.executable, "-m", "fusec", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300)


SLOW = pytest.mark.slow          # the block compiles for cpu in about a minute on a busy 2-core machine


@pytest.mark.parametrize("make, shape, target", [(mlp, (5, 16), "cpu"), (block, (2, 6, 16), "reference"),
                                                 pytest.param(block, (2, 6, 16), "cpu", marks=SLOW)])
def test_import_then_run_with_two_input_files(make, shape, target, tmp_path):
    path = save(make(), tmp_path / "model.onnx")
    r = fusec_cli("import", "model.onnx", "-o", "out/model.fdsl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "wrote out/model.fdsl" in r.stdout and "wrote out/model.npz" in r.stdout
    text = (tmp_path / "out" / "model.fdsl").read_text()
    fusec.check(text)                                          # the written file re-parses and checks
    chain = fusec.check(text).chains[0].name
    x = rand(shape, 30)
    np.savez(tmp_path / "x.npz", **{f"{chain}/in/x": x})
    r = fusec_cli("out/model.fdsl", "--inputs", "out/model.npz", "--inputs", "x.npz", "--target", target,
                  "--save", "res.npz", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    got = np.load(tmp_path / "res.npz")[f"{chain}/out/0"]
    want = ort_run(path, {"x": x})[0]
    assert compare(got, want, "f32").ok


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=SLOW)])
def test_load_runs_the_block_at_two_sequence_lengths(target, tmp_path):
    path = save(block(), tmp_path / "block.onnx")
    m = fonnx.load(path, target=target, cache=False)
    assert m.input_names == ["x"] and m.output_names == ["out"]
    assert "chain block(x: f32[B, S, 16]" in m.fdsl            # dim_params are symbols
    assert "layernorm(" in m.fdsl and "softmax(" in m.fdsl and 'gelu(f1, approximate="none")' in m.fdsl
    for shape in [(2, 5, 16), (1, 9, 16)]:
        x = rand(shape, 40)
        (got,) = m(x=x)
        assert got.shape == shape
        assert compare(got, ort_run(path, {"x": x})[0], "f32").ok
    with pytest.raises(UsageError, match="no input 'y'"):
        m(y=x)
    with pytest.raises(UsageError, match="missing input 'x'"):
        m()
    with pytest.raises(fusec.FdslError, match=r"block\.onnx\.fdsl:2:\d+: error: input 'x' has shape \(2, 5, 8\)"):
        m(x=rand((2, 5, 8), 1))                             # a wrong input is named at the chain's parameter


def test_a_key_two_input_files_hold_with_different_arrays_is_refused(tmp_path, capsys):
    (tmp_path / "a.fdsl").write_text("chain c(x: f32[4]) -> f32[4] {\n    return x * 2.0\n}\n")
    np.savez(tmp_path / "one.npz", **{"c/in/x": np.ones(4, np.float32)})
    np.savez(tmp_path / "two.npz", **{"c/in/x": np.zeros(4, np.float32)})
    np.savez(tmp_path / "same.npz", **{"c/in/x": np.ones(4, np.float32)})
    argv = [str(tmp_path / "a.fdsl"), "--target", "reference", "--inputs", str(tmp_path / "one.npz"), "--inputs"]
    assert main(argv + [str(tmp_path / "two.npz")]) == 1
    err = capsys.readouterr().err
    assert "two.npz holds c/in/x, which" in err and "one.npz holds too, with another value" in err
    assert main(argv + [str(tmp_path / "same.npz")]) == 0     # the same array twice is one input


def test_fusec_run_merges_input_files_too(tmp_path):
    (tmp_path / "a.fdsl").write_text("chain c(x: f32[4], w: f32[4]) -> f32[4] {\n    return x * w\n}\n")
    np.savez(tmp_path / "w.npz", **{"c/in/w": np.full(4, 2, np.float32)})
    np.savez(tmp_path / "x.npz", **{"c/in/x": np.arange(4, dtype=np.float32)})
    r = fusec_cli("compile", "a.fdsl", "-o", "art", "--target", "cpu", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = fusec_cli("run", "art", "--inputs", "w.npz", "--inputs", "x.npz", "--save", "out.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "out.npz")["c/out/0"], np.arange(4, dtype=np.float32) * 2)


def test_import_model_takes_a_model_proto_and_names_unnamed_dims():
    m = model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [None, 4])], [tensor("y", F, None)], name="r")
    imp = fonnx.import_model(m)
    assert "chain r(x: f32[x_d0, 4]) -> f32[x_d0, 4]" in " ".join(imp.text.split())
    assert imp.inputs == [("x", "x")] and imp.outputs == ["y"] and imp.weights == {}


# ---- hostile, broken and unsupported files ------------------------------------------------------

def refuse(argv, capsys, *expected):
    """`fusec import ...` exits 1 with one `fusec: error:` line holding every expected text."""
    status = main(["import", *argv])
    err = capsys.readouterr().err
    assert status == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusec: error: ") and "Traceback" not in err, err
    for e in expected:
        assert e in lines[0], lines[0]
    return lines[0]


def test_truncated_and_non_onnx_files(tmp_path, capsys):
    data = mlp().SerializeToString()
    cases = {"truncated.onnx": data[: len(data) // 3], "text.onnx": b"this is not a model\n" * 5,
             "random.onnx": np.random.default_rng(0).bytes(4096), "empty.onnx": b""}
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        refuse([str(tmp_path / name), "-o", str(tmp_path / "o.fdsl")], capsys, name)
    refuse([str(tmp_path / "missing.onnx")], capsys, "cannot read", "missing.onnx")
    refuse(["/dev/zero", "-o", str(tmp_path / "o.fdsl")], capsys, "/dev/zero is not a regular file")
    refuse([str(tmp_path), "-o", str(tmp_path / "o.fdsl")], capsys, "is a directory")
    assert not (tmp_path / "o.fdsl").exists()


def test_cycle_undefined_input_and_opsets(tmp_path, capsys):
    o = str(tmp_path / "o.fdsl")
    cyc = model([h.make_node("Add", ["x", "d"], ["c"], name="first"), h.make_node("Relu", ["c"], ["d"], name="second")],
                [tensor("x", F, [4])], [tensor("d", F, [4])])
    refuse([save(cyc, tmp_path / "cycle.onnx"), "-o", o], capsys, "cycle through node 0 'first' (Add)")
    undef = model([h.make_node("Add", ["x", "nowhere"], ["y"], name="add")], [tensor("x", F, [4])],
                  [tensor("y", F, [4])])
    refuse([save(undef, tmp_path / "undef.onnx"), "-o", o], capsys, "node 0 'add' (Add) reads 'nowhere'")
    for opset in (16, 22):
        m = model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [4])], [tensor("y", F, [4])], opset=opset)
        refuse([save(m, tmp_path / f"op{opset}.onnx"), "-o", o], capsys, f"opset {opset}", "opsets 17 to 21")
    hostile = model([h.make_node("Relu", ["x"], ["y"]), h.make_node("Foo", ["y"], ["z"], name="evil\nname" + "x" * 5000)],
                    [tensor("x", F, [4])], [tensor("z", F, [4])])
    line = refuse([save(hostile, tmp_path / "hostile.onnx"), "-o", o], capsys, "node 1 'evil\\nname", "(Foo)")
    assert len(line) < 1100                 # a name from the file is escaped and cut, the line stays one line
    other = model([h.make_node("Foo", ["x"], ["y"], domain="com.example", name="foo")], [tensor("x", F, [4])],
                  [tensor("y", F, [4])])
    other.opset_import.append(h.make_opsetid("com.example", 1))
    refuse([save(other, tmp_path / "dom.onnx"), "-o", o], capsys, "node 0 'foo' (com.example::Foo)", "domain")


def external_model(tmp_path, location, length=None, dims=(4, 4)):
    t = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=list(dims), data_location=onnx.TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", "0")) + ((("length", str(length)),) if length else ()):
        t.external_data.add(key=k, value=v)
    m = model([h.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", F, [2, 4])], [tensor("y", F, [2, 4])], [t])
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return str(path)


def test_external_data_is_read_only_inside_the_model_folder(tmp_path, capsys):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    o = str(tmp_path / "o.fdsl")
    refuse([external_model(tmp_path, "../secret.bin"), "-o", o], capsys, "initializer 'w'", "'..'")
    refuse([external_model(tmp_path, str(secret)), "-o", o], capsys, "initializer 'w'", "absolute path")
    path = external_model(tmp_path, "link.bin")
    os.symlink(secret, tmp_path / "model" / "link.bin")
    refuse([path, "-o", o], capsys, "initializer 'w'", "outside the model's folder")
    (tmp_path / "model" / "short.bin").write_bytes(b"\0" * 8)
    refuse([external_model(tmp_path, "short.bin"), "-o", o], capsys, "initializer 'w'", "beyond the end of 'short.bin'")
    (tmp_path / "model" / "w.bin").write_bytes(np.eye(4, dtype=np.float32).tobytes())
    refuse([external_model(tmp_path, "w.bin", length=999), "-o", o], capsys, "initializer 'w'", "length is 999")
    # a well-formed external file inside the folder is read
    assert main(["import", external_model(tmp_path, "w.bin"), "-o", o]) == 0
    capsys.readouterr()
    assert np.array_equal(np.load(tmp_path / "o.npz")["g/in/w"], np.eye(4, dtype=np.float32))


def test_initializer_sizes_and_dtypes(tmp_path, capsys):
    o = str(tmp_path / "o.fdsl")
    big = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[1 << 20, 1 << 20], raw_data=b"\0" * 16)
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F, [4])], [tensor("y", F, [4])], [big])
    refuse([save(m, tmp_path / "big.onnx"), "-o", o], capsys, "initializer 'w'", "over the memory limit")
    lying = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[64], raw_data=b"\0" * 16)
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F, [64])], [tensor("y", F, [64])], [lying])
    refuse([save(m, tmp_path / "lying.onnx"), "-o", o], capsys, "initializer 'w'", "holds 16 bytes")
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F, [64])], [tensor("y", F, [64])],
              [init("w", rand((64,), 1))])
    refuse([save(m, tmp_path / "ok.onnx"), "-o", o, "--max-memory", "100"], capsys, "over the memory limit")
    m = model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", TP.UINT8, [4])], [tensor("y", TP.UINT8, [4])])
    refuse([save(m, tmp_path / "u8.onnx"), "-o", o], capsys, "graph input 'x'", "UINT8",
           "f32, f16, bf16, f64, i32, i64 and bool")
    s = h.make_tensor("s", TP.STRING, [1], [b"a"])
    m = model([h.make_node("Identity", ["s"], ["y"])], [], [tensor("y", TP.STRING, [1])], [s])
    refuse([save(m, tmp_path / "str.onnx"), "-o", o], capsys, "initializer 's'", "STRING")


def test_unsupported_ops_name_the_node_and_what_fusec_offers(tmp_path, capsys):
    o = str(tmp_path / "o.fdsl")
    pool = model([h.make_node("Relu", ["x"], ["r"]),
                  h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], name="pool1")],
                 [tensor("x", F, [1, 2, 4, 4])], [tensor("y", F, [1, 2, 2, 2])])
    refuse([save(pool, tmp_path / "pool.onnx"), "-o", o], capsys, "node 1 'pool1' (MaxPool)", "asymmetric pads")
    same = model([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], auto_pad="SAME_UPPER", name="ap")],
                 [tensor("x", F, [1, 2, 4, 4])], [tensor("y", F, [1, 2, 4, 4])])
    refuse([save(same, tmp_path / "same.onnx"), "-o", o], capsys, "node 0 'ap' (AveragePool)", "auto_pad='SAME_UPPER'")
    idx = model([h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="mpi")],
                [tensor("x", F, [1, 2, 4, 4])], [tensor("y", F, [1, 2, 2, 2]), tensor("i", TP.INT64, [1, 2, 2, 2])])
    refuse([save(idx, tmp_path / "idx.onnx"), "-o", o], capsys, "node 0 'mpi' (MaxPool)", "Indices")
    grouped = model([h.make_node("Conv", ["x", "w"], ["y"], group=3, name="dw")],
                    [tensor("x", F, [1, 2, 4, 4])], [tensor("y", F, [1, 2, 2, 2])], [init("w", rand((2, 1, 3, 3)))])
    refuse([save(grouped, tmp_path / "grouped.onnx"), "-o", o], capsys, "node 0 'dw' (Conv)",
           "group=3 does not divide its 2 input channels")
    se = model([h.make_node("ScatterElements", ["x", "i", "x"], ["y"], name="se")],
               [tensor("x", F, [4, 4]), tensor("i", TP.INT64, [4, 4])], [tensor("y", F, [4, 4])])
    refuse([save(se, tmp_path / "se.onnx"), "-o", o], capsys, "node 0 'se' (ScatterElements)", "no scatter")
    ge = model([h.make_node("GatherElements", ["x", "i"], ["y"], name="ge", axis=1)],   # i longer than x on axis 0
               [tensor("x", F, [4, 4]), tensor("i", TP.INT64, [5, 4])], [tensor("y", F, [5, 4])])
    refuse([save(ge, tmp_path / "ge.onnx"), "-o", o], capsys, "node 0 'ge' (GatherElements)", "smaller number")
    idiv = model([h.make_node("Div", ["a", "b"], ["y"], name="idiv")],
                 [tensor("a", TP.INT64, [4]), tensor("b", TP.INT64, [4])], [tensor("y", TP.INT64, [4])])
    refuse([save(idiv, tmp_path / "idiv.onnx"), "-o", o], capsys, "node 0 'idiv' (Div)", "not i64")
    sym = model([h.make_node("Conv", ["x", "w"], ["y"], name="c")], [tensor("x", F, [1, 2, "H", 4])],
                [tensor("y", F, None)], [init("w", rand((2, 2, 3, 3)))])
    refuse([save(sym, tmp_path / "sym.onnx"), "-o", o], capsys, "node 0 'c' (Conv)", "symbol H")
    stats = model([h.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], name="ln")], [tensor("x", F, [2, 4])],
                  [tensor("y", F, [2, 4]), tensor("mean", F, [2, 1])], [init("g", rand((4,)))])
    refuse([save(stats, tmp_path / "stats.onnx"), "-o", o], capsys, "node 0 'ln' (LayerNormalization)",
           "output 1 (Mean) is used")
    assert not (tmp_path / "o.fdsl").exists() and not (tmp_path / "o.npz").exists()


def test_constant_folding_is_bounded(tmp_path, capsys):
    """Constants that would fold into more elements than fusec folds are refused before onnx's
    reference evaluator allocates them; a huge ConstantOfShape stays a `full` in the chain."""
    o = str(tmp_path / "o.fdsl")
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))   # noqa: E731
    rng = model([h.make_node("Range", ["a", "b", "c"], ["r"], name="range"), h.make_node("Cast", ["r"], ["y"], to=F)],
                [], [tensor("y", F, None)], [i64("a", 0), i64("b", 10 ** 12), i64("c", 1)])
    refuse([save(rng, tmp_path / "range.onnx"), "-o", o], capsys, "node 0 'range' (Range)", "more than fusec folds")
    tile = model([h.make_node("Tile", ["t", "reps"], ["y"], name="tile")], [], [tensor("y", F, None)],
                 [init("t", rand((4, 4))), i64("reps", [10 ** 6, 10 ** 6])])
    refuse([save(tile, tmp_path / "tile.onnx"), "-o", o], capsys, "node 0 'tile' (Tile)", "more than fusec folds")
    big = model([h.make_node("ConstantOfShape", ["shp"], ["z"]), h.make_node("Add", ["x", "z"], ["y"])],
                [tensor("x", F, [1])], [tensor("y", F, None)], [i64("shp", [100000, 100000])])
    assert main(["import", save(big, tmp_path / "big.onnx"), "-o", o]) == 0
    assert "z = full([100000, 100000], 0.0, dtype=f32)" in (tmp_path / "o.fdsl").read_text()


def test_importing_fusec_does_not_import_onnx():
    code = ("import sys, fusec, fusec.cli; assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules\n"
            "assert callable(fusec.onnx.load)")           # the importer's door loads on first use
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_missing_onnx_package_is_one_line_saying_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from fusec.cli import main; sys.exit(main(['import', 'm.onnx']))")
    (tmp_path / "m.onnx").write_bytes(b"")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == "fusec: error: importing ONNX models needs the onnx package: pip install 'fusec[onnx]'"
