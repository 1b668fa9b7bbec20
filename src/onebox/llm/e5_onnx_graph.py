"""The e5 encoder as an ONNX graph, built from the bundled weights with ``onnx.helper``.

    model = build_graph(load_e5_weights())            # onnx.ModelProto, ~85 MB of fp32
    quantise_int8(model, out_path, work_dir)           # weights -> int8, ~22 MB

Inputs: ``embeddings`` (float32 ``[batch, length, 384]``: word + position + type rows,
summed by the caller, because the 250k-row word table is 4-bit in the bundled file and
would add 384 MB to the graph as fp32) and ``mask`` (int64 ``[batch, length]``, 1 for
real tokens). Output ``pooled``: the mask-weighted mean of the last hidden states, not
normalised (the windows of a long text are combined before normalising). Inside: the
embedding LayerNorm, 12 post-LN BERT blocks and the mean pool. Attention is ONNX
Runtime's fused ``com.microsoft.Attention`` (QKV product, key padding mask, softmax);
GELU is the exact erf form, which ORT fuses into one kernel. Quantisation is dynamic:
int8 weights per output channel, uint8 activations quantised per run, so ORT runs its
VNNI/AMX integer kernels (``QAttention``, ``DynamicQuantizeMatMul``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onebox.llm.e5_weights import F32, E5Config

OPSET = 17  # LayerNormalization


class EncoderWeights(Protocol):
    """What the graph is built from: e5's file (``E5Weights``), or another BERT encoder's
    tensors under e5's names (``emb.ln.w``, ``l0.q.w``... ``l0.oln.b``)."""

    @property
    def config(self) -> E5Config: ...

    @property
    def tensors(self) -> dict[str, F32]: ...


class _Graph:
    """Accumulates nodes and initialisers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs: Any) -> str:
        out = name or f"{op_type.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n_{out}", **attrs))
        return out

    def linear(self, x: str, weight: F32, bias: F32, prefix: str) -> str:
        """``x @ weight + bias``."""
        w = self.const(f"{prefix}.w", np.ascontiguousarray(weight))
        return self.op("Add", [self.op("MatMul", [x, w]), self.const(f"{prefix}.b", bias)])

    def layer_norm(self, x: str, weight: F32, bias: F32, prefix: str, eps: float) -> str:
        return self.op("LayerNormalization", [x, self.const(f"{prefix}.g", weight),
                                              self.const(f"{prefix}.beta", bias)],
                       axis=-1, epsilon=eps)


def build_graph(weights: EncoderWeights, name: str = "e5_small") -> onnx.ModelProto:
    cfg, t = weights.config, weights.tensors
    g = _Graph()
    x = g.layer_norm("embeddings", t["emb.ln.w"], t["emb.ln.b"], "emb.ln", cfg.eps)
    key_mask = g.op("Cast", ["mask"], to=TensorProto.INT32)
    for index in range(cfg.layers):
        x = _block(g, weights, index, x, key_mask)
    _mean_pool(g, x, g.op("Cast", ["mask"], to=TensorProto.FLOAT))
    graph = helper.make_graph(
        g.nodes, name, [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT,
                                          ["batch", "length", cfg.hidden]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "length"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", cfg.hidden])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _block(g: _Graph, weights: EncoderWeights, index: int, x: str, key_mask: str) -> str:
    t, eps, p = weights.tensors, weights.config.eps, f"l{index}"
    qkv_w = np.concatenate([_matrix(weights, f"{p}.{n}.w") for n in "qkv"], axis=1)
    qkv_b = np.concatenate([t[f"{p}.{n}.b"] for n in "qkv"])
    context = g.op("Attention", [x, g.const(f"{p}.qkv.w", qkv_w), g.const(f"{p}.qkv.b", qkv_b),
                                 key_mask], domain="com.microsoft", num_heads=weights.config.heads)
    attn = g.op("Add", [x, g.linear(context, _matrix(weights, f"{p}.ao.w"), t[f"{p}.ao.b"],
                                    f"{p}.ao")])
    x = g.layer_norm(attn, t[f"{p}.aln.w"], t[f"{p}.aln.b"], f"{p}.aln", eps)
    middle = _gelu(g, g.linear(x, _matrix(weights, f"{p}.fi.w"), t[f"{p}.fi.b"], f"{p}.fi"))
    out = g.op("Add", [x, g.linear(middle, _matrix(weights, f"{p}.fo.w"), t[f"{p}.fo.b"],
                                   f"{p}.fo")])
    return g.layer_norm(out, t[f"{p}.oln.w"], t[f"{p}.oln.b"], f"{p}.oln", eps)


def _matrix(weights: EncoderWeights, name: str) -> F32:
    """A ``[out, in]`` weight as the ``[in, out]`` operand of ``x @ w``."""
    rows = weights.tensors[name.replace(".w", ".b")].size
    return weights.tensors[name].reshape(rows, -1).T


def _gelu(g: _Graph, x: str) -> str:
    """Exact GELU, ``0.5·x·(1 + erf(x/√2))``."""
    n = len(g.nodes)
    erf = g.op("Erf", [g.op("Div", [x, g.const(f"sqrt2_{n}", np.sqrt(2.0))])])
    one_plus = g.op("Add", [erf, g.const(f"one_{n}", 1.0)])
    return g.op("Mul", [g.op("Mul", [x, one_plus]), g.const(f"half_{n}", 0.5)])


def _mean_pool(g: _Graph, x: str, maskf: str) -> None:
    weights = g.op("Unsqueeze", [maskf, g.const("axes_2", [2], np.int64)])
    total = g.op("ReduceSum", [g.op("Mul", [x, weights]), g.const("axes_1", [1], np.int64)],
                 keepdims=0)
    count = g.op("ReduceSum", [maskf, g.const("axes_1b", [1], np.int64)], keepdims=1)
    g.op("Div", [total, count], name="pooled")


def quantise_int8(model: onnx.ModelProto, out: Path, work_dir: Path) -> None:
    """Dynamic int8 quantisation (per output channel) of every weight product into ``out``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32_path = work_dir / "e5-fp32.onnx"
    onnx.save_model(model, str(fp32_path))
    quantize_dynamic(fp32_path, out, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
    fp32_path.unlink()
