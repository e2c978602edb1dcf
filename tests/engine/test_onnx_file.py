"""The wire-format walker: nested subgraphs are read, hostile nesting is refused in bounded
time and memory (the file is handed to a child process with limits, so a walker that breaks
cannot take the shared machine down)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from app.engine.onnx_file import MAX_SUBGRAPH_DEPTH, MAX_SUBGRAPHS, inspect_onnx
from app.errors import ModelLoadError

ROOT = Path(__file__).resolve().parents[2]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _prefix(number: int, inner_length: int) -> bytes:
    return _varint(number << 3 | 2) + _varint(inner_length)


IDENTITY_GRAPH = _field(1, _field(4, b"Identity"))  # GraphProto{node: NodeProto{op_type}}


def _model(graph: bytes | list[bytes]) -> bytes:
    """ModelProto bytes: IR version 10, opset 17, the given GraphProto payload (pieces)."""
    pieces = graph if isinstance(graph, list) else [graph]
    size = sum(len(p) for p in pieces)
    head = b"\x08\x0a" + _field(8, b"\x10\x11") + _prefix(7, size)
    return head + b"".join(pieces)


def nested_if_model(depth: int) -> bytes:
    """``depth`` If nodes, each the then_branch of the one above, written prefix by prefix
    (no protobuf library would build 100k levels)."""
    prefixes = []
    length = len(IDENTITY_GRAPH)
    for _ in range(depth):
        attr_head = _field(1, b"then_branch") + b"\xa0\x01\x05" + _prefix(6, length)
        attr_len = len(attr_head) + length
        node_head = _field(4, b"If") + _prefix(5, attr_len)
        node_len = len(node_head) + attr_len
        graph_head = _prefix(1, node_len)
        prefixes.append(graph_head + node_head + attr_head)
        length = len(graph_head) + node_len
    return _model([*reversed(prefixes), IDENTITY_GRAPH])


def wide_if_model(count: int) -> bytes:
    """One graph with ``count`` If nodes, each holding a one-node subgraph."""
    attr = _field(1, b"then_branch") + b"\xa0\x01\x05" + _field(6, IDENTITY_GRAPH)
    node = _field(1, _field(4, b"If") + _field(5, attr))
    return _model(node * count)


_INSPECT_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from pathlib import Path
from app.errors import HearthError
from app.engine.onnx_file import inspect_onnx
try:
    summary = inspect_onnx(Path(sys.argv[1]))
except HearthError as exc:
    print("ERROR:", exc)
else:
    print("ACCEPTED", summary.nodes)
"""


def _inspect_bounded(path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", _INSPECT_BOUNDED, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()


def test_the_hand_written_wire_format_is_what_onnx_reads(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(nested_if_model(3))
    model = onnx.load(path)
    assert model.graph.node[0].op_type == "If"
    inner = model.graph.node[0].attribute[0].g.node[0].attribute[0].g
    assert inner.node[0].attribute[0].g.node[0].op_type == "Identity"
    summary = inspect_onnx(path)
    assert summary.nodes == 4 and summary.op_types == {("", "If"), ("", "Identity")}


def test_real_nested_control_flow_is_read(tmp_path):
    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{name}_y"])], name, [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1])])

    inner_if = helper.make_node("If", ["c"], ["z"], then_branch=branch("a", "Relu"),
                                else_branch=branch("b", "Neg"))
    outer = helper.make_graph([inner_if], "outer", [],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    node = helper.make_node("If", ["c"], ["out"], then_branch=outer,
                            else_branch=branch("c", "Abs"))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "cf.onnx"
    onnx.save(model, path)
    summary = inspect_onnx(path)
    assert {op for _, op in summary.op_types} == {"If", "Relu", "Neg", "Abs"}


def test_nesting_at_the_limit_is_accepted(tmp_path):
    path = tmp_path / "ok.onnx"
    path.write_bytes(nested_if_model(MAX_SUBGRAPH_DEPTH))
    assert inspect_onnx(path).nodes == MAX_SUBGRAPH_DEPTH + 1


@pytest.mark.parametrize("depth", [MAX_SUBGRAPH_DEPTH + 1, 100_000])
def test_absurdly_deep_nesting_is_refused(tmp_path, depth):
    path = tmp_path / "deep.onnx"
    path.write_bytes(nested_if_model(depth))
    output = _inspect_bounded(path)
    assert output.startswith(f"ERROR: {path} is not a model Hearth will load"), output
    assert f"nest more than {MAX_SUBGRAPH_DEPTH} levels" in output


def test_a_hundred_thousand_subgraphs_are_refused(tmp_path):
    path = tmp_path / "wide.onnx"
    path.write_bytes(wide_if_model(100_000))
    output = _inspect_bounded(path)
    assert output.startswith(f"ERROR: {path} is not a model Hearth will load"), output
    assert f"more than {MAX_SUBGRAPHS:,} subgraphs" in output


def test_the_refusal_reaches_the_model_folder_reader(plain_model_dir, tmp_path):
    import shutil

    from app.engine.package import read_model_folder

    folder = shutil.copytree(plain_model_dir, tmp_path / "m")
    (folder / "onnx" / "model.onnx").write_bytes(nested_if_model(1000))
    with pytest.raises(ModelLoadError, match="nest more than"):
        read_model_folder(folder)
