"""A CNN training step runs native end to end (issue 23 §1).

The digits CNN of ``minigraph.examples.train_digits_cnn`` (momentum and Adam; NHWC and
NCHW) and the CIFAR-style ResNet-8 of ``minigraph.examples.resnet8`` (batch norm in training
mode, stride-2 projection shortcuts, global average pool, SGD with momentum) each run one
training step on
the native backend with ``RunMetadata``: no node with a float32 output may pick a
``reference:`` kernel, apart from the ops listed below; and the step's loss and every
variable it updates (weights, batch-norm statistics, optimizer slots) match the reference
backend's step from the same initial values within a stated tolerance.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE

import minigraph as mg
from minigraph.examples import train_digits_cnn
from minigraph.examples.resnet8 import build_resnet8_training

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native kernels are not built")

F32 = np.float32
# Kernels that move or hold tensors but do no float arithmetic: every backend shares them
# (a NoOp: the remapper leaves one named as each update it fuses that was a run target).
NO_ARITHMETIC = {"Const", "Variable", "VariableV2", "Assign", "_FusedAssign", "Identity", "Reshape",
                 "NoOp"}
# A variable after the step: |native - reference| <= RTOL * max|reference| + ATOL. The two
# backends' convolutions and gradients round differently (GEMM blocking against numpy's
# einsum), each within K * 2^-24 * sum|a*b| per element; batch norm's backward subtracts
# means of products, which may cost a few more digits; one step of lr 0.01-0.05 moves the
# weights by about lr * |grad|.
RTOL, ATOL = 1e-4, 1e-6


def digits_step(optimizer: str, data_format: str = "NHWC") -> dict:
    args = train_digits_cnn.finish_args(argparse.Namespace(
        data_format=data_format, seed=3, dtype="float32", optimizer=optimizer, learning_rate=None))
    g = train_digits_cnn.build(args)
    rng = np.random.default_rng(5)
    feeds = {g["images"]: rng.random((16, 8, 8, 1), dtype=F32),
             g["labels"]: rng.integers(0, 10, 16).astype(np.int32)}
    return {"root": g["root"], "feeds": feeds, "loss": g["loss"], "step": g["step"]}


def resnet8_step() -> dict:
    root = mg.Scope.NewRootScope()
    model = build_resnet8_training(root, 4, seed=11)
    rng = np.random.default_rng(6)
    feeds = {model.images: rng.standard_normal((4, 32, 32, 3)).astype(F32),
             model.labels: rng.integers(0, 10, 4).astype(np.int32)}
    return {"root": root, "feeds": feeds, "loss": model.loss, "step": model.train_op}


def run_step(case: dict, backend: str) -> tuple[float, dict[str, np.ndarray], list]:
    """(loss, every variable after the step, the step's NodeStats) on ``backend``."""
    root = case["root"]
    session = mg.ClientSession(root, backend=backend)
    session.Run({}, [], targets=mg.train.global_variables_initializer(root))
    metadata = mg.RunMetadata()
    loss = session.Run(case["feeds"], [case["loss"]], targets=case["step"],
                       run_metadata=metadata)[0]
    variables = [op for op in root.graph().get_operations() if op.type in ("Variable",
                                                                           "VariableV2")]
    values = session.Run({}, [op.outputs[0] for op in variables])
    return float(loss), {op.name: v for op, v in zip(variables, values)}, metadata.step_stats


def float32_reference_nodes(root: mg.Scope, stats) -> list[str]:
    """Nodes with a float32 output that ran a ``reference:`` kernel, beyond the allowed."""
    graph = root.graph()
    offenders = []
    for s in stats:
        if s.backend != "reference" or s.op_type in NO_ARITHMETIC:
            continue
        outputs = graph.get_operation(s.node_name).outputs
        if not any(o.dtype == mg.float32 for o in outputs):
            continue
        offenders.append(f"{s.op_type} '{s.node_name}' ({s.kernel})")
    return offenders


CASES = {"digits-momentum": lambda: digits_step("momentum"),
         "digits-adam": lambda: digits_step("adam"),
         "digits-momentum-nchw": lambda: digits_step("momentum", "NCHW"),
         "resnet8-momentum": resnet8_step}


@pytest.mark.parametrize("name", list(CASES))
def test_training_step_runs_native_and_matches_the_reference(name):
    case = CASES[name]()
    loss, variables, stats = run_step(case, "native")
    assert float32_reference_nodes(case["root"], stats) == []
    backends = {s.op_type: s.backend for s in stats}
    for op_type in ("AddN", "ApplyMomentum", "ApplyAdam", "BiasAddGrad", "Mean",
                    "SparseSoftmaxCrossEntropyWithLogits", "FusedBatchNormGradV3", "ReluGrad"):
        if op_type in backends:  # what the step has runs native (a check of the check)
            assert backends[op_type] == "native", op_type
    ref_loss, ref_variables, _ = run_step(case, "reference")
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert variables.keys() == ref_variables.keys()
    for key, ref in ref_variables.items():
        bound = RTOL * float(np.abs(ref).max(initial=0.0)) + ATOL
        error = float(np.abs(variables[key] - ref).max(initial=0.0))
        assert error <= bound, (key, error, bound)
