"""The training benchmarks' plumbing (benchmarks/train_peers.py and its modules), no timing.

* The minigraph worker process (native backend) trains each model three steps on the shared
  initial arrays; its losses are finite and agree with the numpy reference backend's within
  ``LOSS_RTOL`` (the tolerance the benchmark table states for its peers).
* The analytic FLOP count (``_training_models.Trace``) equals the multiply-adds of the
  convolutions, their gradients and the matmuls in minigraph's own training graph.
* ``--minigraph-options`` reaches ``mg.OptimizerOptions``, and turning a pass off leaves the
  losses bit for bit unchanged.
* Oracle: TensorFlow's peer (the model written once over the op vocabulary) gives the same
  losses as minigraph's example builders.
* benchmarks/conv_peers.py's minigraph cases compute their layers (forward and both
  gradients, NHWC and NCHW) as the float64 numpy reference does.

PyTorch is not needed (CI has none); its peer is checked by the benchmark's own loss column.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
sys.path.insert(0, BENCHMARKS)
from _common import parse_options  # noqa: E402
from _training_models import MODELS, Trace, initial_arrays, same_padding  # noqa: E402
from _training_peers import _minigraph_graph, make_step  # noqa: E402
from train_peers import LOSS_RTOL, each_pass_options, start_workers  # noqa: E402

TRAINED = ("resnet8", "digits")
# the models minigraph builds over the benchmark's vocabulary (not an example's builder)
GENERIC = tuple(name for name, model in MODELS.items() if model.builder == "generic")
DEPTHWISE = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
             "DepthwiseConv2dNativeBackpropFilter")
PRODUCTS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", *DEPTHWISE)


def _losses(model: str, peer: str, backend: str = "native") -> list[float]:
    """The first three losses of ``peer`` on ``model``'s shared initial arrays, in this
    process."""
    step, _ = make_step(MODELS[model], peer, initial_arrays(MODELS[model]), backend=backend)
    return [float(step()) for _ in range(3)]


@pytest.mark.parametrize("model", TRAINED)
def test_minigraph_worker_matches_reference_backend(model, tmp_path):
    """The worker process the benchmark starts (native backend, its arrays from an .npz)."""
    path = str(tmp_path / "arrays.npz")
    np.savez(path, **initial_arrays(MODELS[model]))
    (row,) = start_workers(model, ["minigraph"], [""], path, threads=2)
    try:
        native = row.worker.ready["losses"]
        assert row.worker.ready["first_step_s"] > 0
        assert float(row.worker.ask("time 1")) > 0
    finally:
        row.worker.close()
    assert np.all(np.isfinite(native))
    np.testing.assert_allclose(native, _losses(model, "minigraph", "reference"),
                               rtol=LOSS_RTOL)


def _needed(targets) -> list:
    """The ops a Run of ``targets`` executes: their ancestors through data and control edges
    (the gradient graph also holds products nothing reads, e.g. the images' gradient)."""
    seen, stack = {}, list(targets)
    while stack:
        op = stack.pop()
        if op.name not in seen:
            seen[op.name] = op
            stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return list(seen.values())


def _graph_macs(model) -> dict[str, int]:
    """Multiply-adds of the products a minigraph training step runs, by kind, from the
    graph's static shapes."""
    _, _, _, loss, targets = _minigraph_graph(model, "NHWC")
    macs = {"forward": 0, "input_grad": 0, "weight_grad": 0}
    for op in _needed(targets + [loss.op]):
        if op.type not in PRODUCTS:
            continue
        # the digits builder leaves the batch dimension unknown: it is the model's batch
        shapes = [tuple(model.batch if d is None else d for d in t.shape.dims)
                  for t in (*op.inputs, op.outputs[0])]
        # a filter's multiply-adds per output: kh * kw * in_channels (depthwise: kh * kw)
        taps = 2 if op.type in DEPTHWISE else 3
        if op.type in ("Conv2D", "DepthwiseConv2dNative"):
            macs["forward"] += math.prod(shapes[-1]) * math.prod(shapes[1][:taps])
        elif op.type.endswith(("BackpropInput", "BackpropFilter")):
            kernel = shapes[1] if op.type.endswith("BackpropInput") else shapes[-1]
            kind = "input_grad" if op.type.endswith("BackpropInput") else "weight_grad"
            macs[kind] += math.prod(shapes[2]) * math.prod(kernel[:taps])
        elif op.type == "MatMul":
            a = shapes[0]
            inner = a[0] if op.attrs["transpose_a"] else a[1]
            kind = ("weight_grad" if op.attrs["transpose_a"] else
                    "input_grad" if op.attrs["transpose_b"] else "forward")
            macs[kind] += math.prod(shapes[-1]) * inner
    return macs


@pytest.mark.parametrize("model", list(MODELS))
def test_analytic_flops_match_minigraph_graph(model):
    trace = Trace(MODELS[model])
    assert _graph_macs(MODELS[model]) == {"forward": trace.forward_macs,
                                          "input_grad": trace.input_grad_macs,
                                          "weight_grad": trace.weight_grad_macs}


def test_parameters_match_builder_variables():
    """Every traced parameter is a variable of minigraph's model with the same shape."""
    for model in MODELS.values():
        _, _, _, _, targets = _minigraph_graph(model, "NHWC")
        variables = {op.name: tuple(op.outputs[0].shape.dims)
                     for op in targets[0].graph.operations() if op.type == "Variable"}
        for name, shape in Trace(model).parameters.items():
            assert variables[model.minigraph_prefix + name] == shape, name


@pytest.mark.parametrize("spec, kwargs, env", [
    ("", {}, {}),
    ("off", {}, {"MINIGRAPH_OPTIMIZER": "off"}),
    ("remapper=off", {"remapper": False}, {}),
    ("remapper=on, layout=off", {"remapper": True, "layout": False}, {}),
])
def test_parse_options(spec, kwargs, env):
    assert parse_options(spec) == (kwargs, env)


def test_parse_options_rejects_bare_names():
    with pytest.raises(ValueError, match="name=on"):
        parse_options("remapper")


def test_optimizer_options_leave_losses_unchanged():
    """Each rewrite is exact: a step with a pass off gives the default's losses bit for bit."""
    model = MODELS["resnet8"]
    arrays = initial_arrays(model)
    default, _ = make_step(model, "minigraph", arrays)
    expected = [float(default()) for _ in range(2)]
    fields = [option.split("=")[0] for option in each_pass_options()]
    assert fields, "OptimizerOptions has no boolean pass switch"
    for name in fields:
        step, _ = make_step(model, "minigraph", arrays, options={name: False})
        assert [float(step()) for _ in range(2)] == expected, name
    with pytest.raises(TypeError):
        make_step(model, "minigraph", arrays, options={"no_such_pass": False})


@given(size=st.integers(1, 64), kernel=st.integers(1, 7), stride=st.integers(1, 4))
def test_same_padding_gives_tf_output_size(size, kernel, stride):
    before, after = same_padding(size, kernel, stride)
    assert before <= after <= before + 1
    padded = size + before + after
    assert padded >= kernel
    assert (padded - kernel) // stride + 1 == math.ceil(size / stride)


@pytest.mark.parametrize("model", GENERIC)
def test_generic_models_match_reference_backend(model):
    """The models built over the vocabulary (``_training_peers._MinigraphOps``): native and
    reference backends' first losses agree within the benchmark's tolerance."""
    native = _losses(model, "minigraph")
    assert np.all(np.isfinite(native))
    np.testing.assert_allclose(native, _losses(model, "minigraph", "reference"),
                               rtol=LOSS_RTOL)


@pytest.mark.oracle
@pytest.mark.parametrize("model", TRAINED + ("lenet5", "mobilenet", "vgg-adam"))
def test_tensorflow_peer_matches_minigraph(model, tmp_path):
    """TensorFlow's step, in its own worker process as the benchmark runs it (a process
    that already ran TensorFlow cannot set its thread counts again)."""
    pytest.importorskip("tensorflow")
    path = str(tmp_path / "arrays.npz")
    np.savez(path, **initial_arrays(MODELS[model]))
    (row,) = start_workers(model, ["tf"], [""], path, threads=2)
    try:
        tf_losses = row.worker.ready["losses"]
    finally:
        row.worker.close()
    np.testing.assert_allclose(tf_losses, _losses(model, "minigraph"), rtol=LOSS_RTOL)


def test_unknown_peer_is_refused():
    with pytest.raises(ValueError, match="unknown peer"):
        make_step(MODELS["digits"], "jax", initial_arrays(MODELS["digits"]))



@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("index", range(len(__import__("conv_peers").LAYERS)))
def test_conv_peers_minigraph_cases_compute_their_layers(index, nchw):
    """benchmarks/conv_peers.py times minigraph's registered kernels on each layer: what they
    return is the layer's convolution, input gradient and filter gradient (SAME, the layer's
    stride) as the numpy reference kernels compute them in float64."""
    import conv_peers

    from minigraph.backends import convolution_kernels as ck
    from minigraph.ops.window import Window
    x, f, dy = conv_peers.case_arrays(index)
    _, _, (n, h, w, c), k, co, stride, _, _ = conv_peers.LAYERS[index]
    out = (conv_peers.out_size(h, k, stride), conv_peers.out_size(w, k, stride))
    pads = tuple((t // 2, t - t // 2) for t in (max((o - 1) * stride + k - size, 0)
                                                for o, size in zip(out, (h, w))))
    window = Window((k, k), (stride, stride), (1, 1), pads, out)
    x64, f64, dy64 = (a.astype(np.float64) for a in (x, f, dy))
    expected = {"forward": ck.conv2d_nhwc(x64, f64, window),
                "input": ck.conv2d_backprop_input_nhwc(dy64, f64, x.shape, window),
                "filter": ck.conv2d_backprop_filter_nhwc(x64, dy64, f.shape, window)}
    for direction, want in expected.items():
        (got,) = conv_peers.minigraph_call(index, direction, nchw, threads=2)()
        if nchw and direction != "filter":
            got = got.transpose(0, 2, 3, 1)
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=direction)


def test_bn_kernels_times_its_cells_in_a_minigraph_worker(capsys):
    """benchmarks/bn_kernels.py runs minigraph in a worker process of its own: a cell's row
    (kernel and Run times, GB/s) and the second-order table come back through the worker
    protocol (the peers skipped: CI has no PyTorch)."""
    import bn_kernels

    assert bn_kernels.main(["--skip", "torch,tf", "--dtypes", "float32", "--shapes",
                            "16x8x8x16", "--formats", "NHWC", "--ops", "fwd-train,bwd-infer",
                            "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| 16x8x8x16")]
    assert [row[3].strip() for row in rows] == ["fwd-train", "bwd-infer"]
    for row in rows:
        kernel_ms, run_ms, reference_ms = (float(row[i]) for i in (4, 5, 6))
        assert 0 < kernel_ms < run_ms and reference_ms > 0
    assert "| minigraph 1st order only |" in out
