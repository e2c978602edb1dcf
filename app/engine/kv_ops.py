"""Tensor surgery on KV caches without leaving the device.

Rewinding a growing cache, evicting the middle of a sliding window and growing a shared buffer
all cut or pad the sequence axis of ``[batch, heads, sequence, head_dim]`` tensors. Doing that
with numpy would copy the cache to the host (impossible for DirectML tensors, and numpy has no
bfloat16), so we run it as tiny ONNX graphs on the same execution provider as the model, with
IOBinding: the data stays where it is and every KV dtype works the same way.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

_ONNX_DTYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
}
_NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}


def empty_kv(shape: list[int], dtype: str, device: str = "cpu") -> ort.OrtValue:
    """A KV tensor of the given shape and dtype (contents undefined unless a dim is 0)."""
    element = _NUMPY_DTYPES.get(dtype) or _ONNX_DTYPES[dtype]
    return ort.OrtValue.ortvalue_from_shape_and_type(shape, element, device, 0)


def _cut_graph(dtype: str) -> onnx.ModelProto:
    """y = concat(x[:, :, :keep_head], x[:, :, tail_start:tail_end]) on axis 2."""
    elem = _ONNX_DTYPES[dtype]
    x = helper.make_tensor_value_info("x", elem, ["b", "h", "s", "d"])
    bounds = helper.make_tensor_value_info("bounds", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", elem, ["b", "h", "t", "d"])
    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["axis"],
            value=helper.make_tensor("axis_v", TensorProto.INT64, [1], [2]),
        ),
        helper.make_node("Split", ["bounds"], ["h0", "h1", "t0", "t1"], axis=0, num_outputs=4),
        helper.make_node("Slice", ["x", "h0", "h1", "axis"], ["head"]),
        helper.make_node("Slice", ["x", "t0", "t1", "axis"], ["tail"]),
        helper.make_node("Concat", ["head", "tail"], ["y"], axis=2),
    ]
    graph = helper.make_graph(nodes, "kv_cut", [x, bounds], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _pad_graph(dtype: str) -> onnx.ModelProto:
    """y = x followed by ``extra`` zero positions on axis 2.

    Built from Shape/ConstantOfShape/Cast/Concat because CPU has no bfloat16 Pad.
    """
    elem = _ONNX_DTYPES[dtype]
    x = helper.make_tensor_value_info("x", elem, ["b", "h", "s", "d"])
    extra = helper.make_tensor_value_info("extra", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", elem, ["b", "h", "t", "d"])

    def const(name: str, values: list[int]):
        tensor = helper.make_tensor(name + "_v", TensorProto.INT64, [len(values)], values)
        return helper.make_node("Constant", [], [name], value=tensor)

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("i0", [0]),
        const("i2", [2]),
        const("i3", [3]),
        const("i4", [4]),
        helper.make_node("Slice", ["shape", "i0", "i2"], ["bh"]),
        helper.make_node("Slice", ["shape", "i3", "i4"], ["d"]),
        helper.make_node("Concat", ["bh", "extra", "d"], ["zshape"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["zshape"],
            ["zf"],
            value=helper.make_tensor("z", TensorProto.FLOAT, [1], [0.0]),
        ),
        helper.make_node("Cast", ["zf"], ["zeros"], to=elem),
        helper.make_node("Concat", ["x", "zeros"], ["y"], axis=2),
    ]
    graph = helper.make_graph(nodes, "kv_pad", [x, extra], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


class KVOps:
    """Cut and pad KV tensors on the model's own execution provider."""

    def __init__(self, providers: list, device: str = "cpu") -> None:
        self._providers = providers
        self._device = device
        self._sessions: dict[tuple[str, str], ort.InferenceSession] = {}

    def _session(self, kind: str, dtype: str) -> ort.InferenceSession:
        key = (kind, dtype)
        if key not in self._sessions:
            model = _cut_graph(dtype) if kind == "cut" else _pad_graph(dtype)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.log_severity_level = 3
            self._sessions[key] = ort.InferenceSession(
                model.SerializeToString(), options, providers=self._providers
            )
        return self._sessions[key]

    def _run(self, kind: str, dtype: str, x: ort.OrtValue, arg_name: str, arg) -> ort.OrtValue:
        session = self._session(kind, dtype)
        io = session.io_binding()
        io.bind_ortvalue_input("x", x)
        io.bind_cpu_input(arg_name, np.asarray(arg, dtype=np.int64))
        io.bind_output("y", self._device)
        session.run_with_iobinding(io)
        return io.get_outputs()[0]

    def cut(
        self, x: ort.OrtValue, dtype: str, keep_head: int, tail_start: int, tail_end: int
    ) -> ort.OrtValue:
        """``x[:, :, :keep_head] ++ x[:, :, tail_start:tail_end]`` along the sequence axis."""
        bounds = [0, keep_head, tail_start, tail_end]
        return self._run("cut", dtype, x, "bounds", bounds)

    def truncate(self, x: ort.OrtValue, dtype: str, length: int) -> ort.OrtValue:
        """The first ``length`` positions of ``x``."""
        return self.cut(x, dtype, length, length, length)

    def pad(self, x: ort.OrtValue, dtype: str, extra: int) -> ort.OrtValue:
        """``x`` with ``extra`` zero positions appended on the sequence axis."""
        return self._run("pad", dtype, x, "extra", [extra])
