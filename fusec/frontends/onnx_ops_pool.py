"""The ONNX pooling ops: MaxPool and AveragePool as max_pool2d and avg_pool2d, GlobalAveragePool
of an NCHW tensor as adaptive_avg_pool2d(x, 1) (mean over the spatial axes for other ranks).
ONNX's defaults differ from PyTorch's, so every attribute is written out: strides default to 1,
count_include_pad to 0. Pads are [h_begin, w_begin, h_end, w_end]; FDSL pads each side of an
axis alike, so asymmetric pads (and auto_pad SAME_*) are refused, as MaxPool's Indices output is.
"""
from __future__ import annotations

from .onnx_values import FLOAT, NodeError


def _pair(v) -> str:
    return str(v[0]) if v[0] == v[1] else f"[{v[0]}, {v[1]}]"


class PoolOps:
    """The pooling ops of Converter."""

    def _pool_window(self, node, attrs, x, dilated: bool) -> tuple[list, list, list, list, bool]:
        self.need_dtype(x, FLOAT, node.op_type)
        if len(x.shape) != 4:
            raise NodeError(f"a pooling of rank {len(x.shape)}; FDSL pools NCHW tensors (rank 4) only")
        xs = self.shape(x)
        if not isinstance(xs[2], int) or not isinstance(xs[3], int):
            raise NodeError(f"its spatial sizes {list(xs[2:])} are symbols; FDSL pooling needs H and W as numbers")
        kernel = [int(k) for k in attrs.get("kernel_shape", [])]
        if len(kernel) != 2:
            raise NodeError(f"kernel_shape {kernel} is not 2-D")
        strides = [int(s) for s in attrs.get("strides", [1, 1])]
        dil = [int(d) for d in attrs.get("dilations", [1, 1])]
        pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
        auto = attrs.get("auto_pad", "NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto == "VALID":
            pads = [0, 0, 0, 0]
        elif auto != "NOTSET":
            raise NodeError(f"auto_pad='{auto}': fusec imports NOTSET (explicit pads) and VALID pooling only")
        if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
            raise NodeError(f"strides {strides}, dilations {dil} or pads {pads} are not those of a 2-D pooling")
        if pads[0] != pads[2] or pads[1] != pads[3]:
            raise NodeError(f"asymmetric pads {pads}; FDSL's pooling pads each side of an axis alike (it has no "
                            "pad operator)")
        if not dilated and dil != [1, 1]:
            raise NodeError(f"dilations {dil}; FDSL's avg_pool2d has no dilation (as PyTorch's)")
        return kernel, strides, pads[:2], dil, bool(int(attrs.get("ceil_mode", 0)))

    def _pool_shape(self, x, kernel, strides, pads, dil, ceil) -> tuple:
        from fusec.dsl.ops.pooling import pool_out
        xs = self.shape(x)
        out = [pool_out(xs[2 + i], kernel[i], strides[i], pads[i], dil[i], ceil) for i in (0, 1)]
        if min(out) < 1:
            raise NodeError("its output would be empty")
        return (xs[0], xs[1], *out)

    def op_MaxPool(self, node, ins, attrs):
        x = self.tensor(ins[0])
        if len(node.output) > 1 and node.output[1] and self.uses(node.output[1]):
            raise NodeError("its Indices output is used; FDSL's max_pool2d gives the values only")
        if int(attrs.get("storage_order", 0)) != 0:
            raise NodeError("storage_order=1 (column-major indices); FDSL's max_pool2d gives no indices")
        kernel, strides, pads, dil, ceil = self._pool_window(node, attrs, x, True)
        args = [x.name, _pair(kernel), f"stride={_pair(strides)}"]
        if pads != [0, 0]:
            args.append(f"padding={_pair(pads)}")
        if dil != [1, 1]:
            args.append(f"dilation={_pair(dil)}")
        if ceil:
            args.append("ceil_mode=true")
        shape = self._pool_shape(x, kernel, strides, pads, dil, ceil)
        return [self.emit(self.out_name(node), f"max_pool2d({', '.join(args)})", x.dtype, shape), None]

    def op_AveragePool(self, node, ins, attrs):
        x = self.tensor(ins[0])
        kernel, strides, pads, dil, ceil = self._pool_window(node, attrs, x, False)
        args = [x.name, _pair(kernel), f"stride={_pair(strides)}"]
        if pads != [0, 0]:
            args.append(f"padding={_pair(pads)}")
        if ceil:
            args.append("ceil_mode=true")
        args.append(f"count_include_pad={'true' if int(attrs.get('count_include_pad', 0)) else 'false'}")
        shape = self._pool_shape(x, kernel, strides, pads, dil, ceil)
        return self.emit(self.out_name(node), f"avg_pool2d({', '.join(args)})", x.dtype, shape)

    def op_GlobalAveragePool(self, node, ins, attrs):
        x = self.tensor(ins[0])
        if len(x.shape) != 4:
            return self._global_pool("mean")(node, ins, attrs)
        self.need_dtype(x, FLOAT, node.op_type)
        xs = self.shape(x)
        if not isinstance(xs[2], int) or not isinstance(xs[3], int):
            return self._global_pool("mean")(node, ins, attrs)
        return self.emit(self.out_name(node), f"adaptive_avg_pool2d({x.name}, 1)", x.dtype, (xs[0], xs[1], 1, 1))
