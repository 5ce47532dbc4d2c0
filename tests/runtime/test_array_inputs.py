"""Inputs from the ecosystem through the API (runtime/executable.py `as_input`): NumPy arrays,
anything with __array__, DLPack producers (a minimal __dlpack__-only object here; PyTorch cpu
tensors where torch is installed); NumPy arrays come back. Things that are not arrays are a
TypeError naming the input."""
import numpy as np
import pytest

import fusec

SOURCE = "chain f(x: f32[M, 8], b: f32[8]) -> f32[M, 8] {\n    return exp(x) * 2 + b\n}\n"


@pytest.fixture(scope="module")
def prog():
    return fusec.compile(SOURCE, target="cpu")


def expected(x, b):
    return np.exp(x) * 2 + b


class ArrayOnly:
    """Only __array__ (no shape, no dtype attribute)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackOnly:
    """Only the DLPack protocol, as a minimal producer has it."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
B = np.arange(8, dtype=np.float32)


@pytest.mark.parametrize("wrap", [np.asarray, ArrayOnly, DLPackOnly], ids=["numpy", "__array__", "dlpack"])
def test_inputs_of_each_kind_give_numpy_outputs(prog, wrap):
    y = prog.f(wrap(X), wrap(B))
    assert type(y) is np.ndarray and y.shape == (4, 8)
    np.testing.assert_allclose(y, expected(X, B), rtol=1e-5)


def test_a_dlpack_input_is_not_copied():
    from fusec.runtime.executable import as_input
    got = as_input(DLPackOnly(X))
    assert isinstance(got, np.ndarray) and np.shares_memory(got, X)


def test_symbols_bind_from_a_dlpack_inputs_shape(prog):
    x = np.ones((3, 8), np.float32)
    assert prog.f.binding_for([DLPackOnly(x), DLPackOnly(B)]) == {"M": 3}


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    prog = fusec.compile(SOURCE, target="cpu")
    y = prog.f(torch.from_numpy(X), torch.from_numpy(B))
    np.testing.assert_allclose(y, expected(X, B), rtol=1e-5)
    assert torch.from_dlpack(y).shape == (4, 8)          # NumPy out, to torch without a copy


def test_what_is_not_an_array_is_a_type_error_naming_the_input(prog):
    with pytest.raises(TypeError, match=r"input 'x' of chain 'f' \(object\) is not an array of numbers"):
        prog.f(object(), B)
    with pytest.raises(fusec.FdslError, match=r"<string>:1:23: error: input 'b' has dtype <U5 but is declared f32\[8\]"):
        prog.f(X, "eight")                               # an array, of the wrong dtype: said at the parameter


class DeviceLike:
    """What a CuPy array or a PyTorch cuda tensor shows the runtime: the CUDA array interface
    (its dtype attribute need not be NumPy's)."""
    dtype = "torch.float32"

    def __init__(self, shape, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False), "version": 3}


def test_symbols_bind_from_a_device_arrays_interface(prog):
    assert prog.f.binding_for([DeviceLike((5, 8), "<f4"), DeviceLike((8,), "<f4")]) == {"M": 5}
    with pytest.raises(fusec.FdslError, match="input 'x' has dtype f64"):
        prog.f.binding_for([DeviceLike((5, 8), "<f8"), B])


def test_a_chain_binds_each_set_of_shapes_once(monkeypatch):
    """The binding is kept by the inputs' shapes and dtypes (Chain.binding_for): a second call
    with the same shapes does not bind again, another M does, and a misfit input is refused on
    every call (an error is never kept)."""
    from fusec.runtime import reference
    chain = fusec.compile(SOURCE, target="reference").f
    calls = []
    bind = reference.bind_symbols
    monkeypatch.setattr(reference, "bind_symbols", lambda *a, **k: calls.append(1) or bind(*a, **k))
    x, b = np.ones((4, 8), np.float32), np.zeros(8, np.float32)
    assert chain.binding_for([x, b]) == {"M": 4} and chain.binding_for([x + 1, b]) == {"M": 4}
    assert len(calls) == 1
    chain.binding_for([x, b])["M"] = 99                  # the caller's copy, not the kept one
    assert chain.binding_for([np.ones((6, 8), np.float32), b]) == {"M": 6} and len(calls) == 2
    assert chain.binding_for([x, b]) == {"M": 4} and len(calls) == 2
    for _ in range(2):
        with pytest.raises(fusec.FdslError, match="input 'b' has shape"):
            chain.binding_for([x, np.zeros(7, np.float32)])
    assert len(calls) == 4
    np.testing.assert_allclose(chain(x, b), expected(x, b), rtol=1e-6)
