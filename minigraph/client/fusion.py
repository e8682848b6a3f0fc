"""Plan-time fusion of a convolution's elementwise successors (TensorFlow's grappler does the
same with its remapper: ``_FusedConv2D`` with ``BiasAdd``, ``FusedBatchNorm``, ``Relu``).

In an inference network each convolution is followed by a chain such as ``BiasAdd ->
FusedBatchNormV3 (inference) -> AddV2 (residual) -> Relu``; run one by one, each reads and
writes the whole activation, so the chain costs more memory traffic than the convolution
itself. A :class:`FusedStep` runs the convolution (or matmul), checks every op of the chain
exactly as its own step would (``validate``, the shape function on the values), and applies
the chain (an :class:`~minigraph.backends.activation_kernels.Epilogue`) without another trip
through memory: a native NHWC ``Conv2D`` applies it to each output tile in registers before
storing it (``mg_conv2d_forward``'s epilogue), other heads in one C pass over cache-sized
blocks of their result (``mg_channel_epilogue``). Each stage
rounds exactly as the op's own kernel does (the batch-norm coefficients are formed as the
native kernel forms them), so results are bit for bit those of the unfused plan; inputs the
pass does not cover (a batch-norm channel the native kernel treats as exceptional, another
dtype or layout) run the ops' own kernels instead.

Checks cost Python time between two kernels (and a kernel's worker thread falls asleep in
it): a fused step whose inputs have the types, dtypes and shapes of a run whose checks all
passed runs its kernel directly, since none of these ops' checks reads an input's values
(``_signature``); anything new is checked in full again. Sessions that check every kernel's
output (``MINIGRAPH_CHECK_OUTPUTS=1``, the test suite) always take the full path.

A chain is fused only where nothing else sees its intermediates: each has exactly one
consumer in the plan and none is fetched; the ops run on the host with native kernels.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import numpy as np

from minigraph.backends import native
from minigraph.backends.activation_kernels import Epilogue, c_channel_epilogue
from minigraph.backends.convolution_kernels import conv2d_native, conv2d_native_epilogue

# ops whose kernels (native or numpy) return a fresh array the epilogue may overwrite
HEADS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")
# the chain's stages, in the only order they are fused
STAGES = ("BiasAdd", "FusedBatchNormV3", "AddV2", "Relu")
ACTIVATIONS = {"Relu": 1, "Relu6": 2}
# heads whose kernel has a variant taking the epilogue: kernel -> variant(op, inputs, ctx,
# epilogue), which applies it where it fits the result and returns the plain result elsewhere
EPILOGUE_KERNELS = {conv2d_native: conv2d_native_epilogue}
_BIG_OFFSET = 2.0 ** 60  # the native batch norm's exceptional-channel bound on |offset|


def _stage(op) -> int | None:
    """The stage index of ``op`` in a chain, or None when it cannot join one."""
    if op.type in ACTIVATIONS:
        return 3
    if op.type == "BiasAdd":
        return 0 if op.attrs["data_format"] == "NHWC" else None
    if op.type == "FusedBatchNormV3":
        attrs = op.attrs
        fits = (not attrs["is_training"] and attrs["data_format"] in ("NHWC", "NDHWC")
                and attrs["T"].name == "float32")
        return 1 if fits else None
    if op.type == "AddV2":
        return 2
    return None


class FusedStep:
    """A head step and the chain of steps fused after it; runs where the last one ran."""

    __slots__ = ("head", "chain", "op", "device", "kernel_def", "in_kernel", "checked",
                 "coefficients")

    def __init__(self, head: Any, chain: list[Any]) -> None:
        self.head, self.chain = head, chain
        self.op, self.device, self.kernel_def = head.op, head.device, head.kernel_def
        # the head's kernel that applies the epilogue to its tiles in registers, if any
        self.in_kernel = EPILOGUE_KERNELS.get(head.kernel)
        self.checked: tuple | None = None  # the inputs' signature every check last passed
        self.coefficients: tuple | None = None  # (scale, variance, offset, k) last formed

    def run(self, env: dict, session: Any) -> None:
        epilogue = self._epilogue(env)
        if epilogue is not None and self.in_kernel is not None:
            signature = None if session.check_outputs else self._signature(env)
            if signature is not None and signature == self.checked and self._run_checked(
                    env, session, epilogue):
                return
            self.head.run(env, session, kernel=partial(self.in_kernel, epilogue=epilogue))
        else:
            signature = None
            self.head.run(env, session)
        y = env[self.head.outputs[0]]
        for step in self.chain:  # every op checked as its own step checks it
            values = [env[key] for key in step.inputs]
            if step.validate is not None:
                step.validate(step.context, values)
            step.output_shapes(values, session.state)
            env[step.outputs[0]] = y
        fits = (epilogue is not None and type(y) is np.ndarray and y.flags.writeable
                and y.dtype == np.float32 and epilogue.fits(y.shape))
        if not fits:  # what the pass does not cover: each op's own kernel
            self._run_ops_after(y, env, session)
            return
        if self.in_kernel is None:
            c_channel_epilogue(y, epilogue)
        for step in self.chain[:-1]:
            del env[step.outputs[0]]
        self.checked = signature

    def _signature(self, env: dict) -> tuple | None:
        """The types, dtypes and shapes of every input of the head and the chain (None when
        an op's checks read an input's values): checks that passed for one signature pass
        for every input of it, so a step that repeats one skips them."""
        steps = (self.head, *self.chain)
        if any(step.value_inputs or step.refs for step in steps):
            return None
        values = [env.get(key) for step in steps for key in step.inputs]
        if any(type(value) is not np.ndarray for value in values[:len(self.head.inputs)]):
            return None
        return tuple((type(v), getattr(v, "dtype", None), getattr(v, "shape", None))
                     for v in values)

    def _run_checked(self, env: dict, session: Any, epilogue: Epilogue) -> bool:
        """The head's kernel with the epilogue, for inputs of a signature whose checks
        passed; False, having changed nothing, when the kernel could not allocate (the full
        path then reports it)."""
        head = self.head
        try:
            [y] = self.in_kernel(head.op, [env[key] for key in head.inputs],
                                 head.kernel_context, epilogue)
        except MemoryError:
            return False
        if not epilogue.fits(y.shape):  # e.g. a strided residual: the ops' own kernels
            self._run_ops_after(y, env, session)
            return True
        env[self.chain[-1].outputs[0]] = y
        return True

    def _run_ops_after(self, y: np.ndarray, env: dict, session: Any) -> None:
        """The chain's ops one by one, each with its own kernel, after the head's plain
        result ``y``."""
        env[self.head.outputs[0]] = y
        for step in self.chain:
            step.run(env, session)

    def _epilogue(self, env: dict) -> Epilogue | None:
        """The chain as an :class:`Epilogue` of its input values, or None when an input
        falls outside what the pass computes bit for bit."""
        bias = mean = k = offset = residual = None
        activation = 0
        for step in self.chain:
            values = [env.get(key) for key in step.inputs]  # (the running value: not yet)
            if step.op.type == "BiasAdd":
                bias = values[1]
            elif step.op.type == "FusedBatchNormV3":
                scale, offset, mean, variance = values[1:]
                if not all(type(v) is np.ndarray and v.dtype == np.float32
                           and v.shape == scale.shape for v in values[1:]):
                    return None  # (the op's own checks then say what is wrong)
                k = self._coefficients(scale, variance, offset,
                                       np.float32(step.op.attrs["epsilon"]))
                if k is None:
                    return None
            elif step.op.type == "AddV2":
                inputs = step.inputs
                residual = values[1] if inputs[0] == self._fed_key(step) else values[0]
            else:
                activation = ACTIVATIONS[step.op.type]
        return Epilogue(bias, mean, k, offset, residual, activation)

    def _coefficients(self, scale: np.ndarray, variance: np.ndarray, offset: np.ndarray,
                      epsilon: np.float32) -> np.ndarray | None:
        """k = scale * (1 / sqrt(variance + epsilon)), as the native batch norm forms it, or
        None when an offset is beyond what the pass covers. Read-only arrays (a graph's
        constants) do not change: for the same ones as last time, the k formed then."""
        last = self.coefficients
        if (last is not None and last[0] is scale and last[1] is variance
                and last[2] is offset and not (scale.flags.writeable
                                               or variance.flags.writeable
                                               or offset.flags.writeable)):
            return last[3]
        if not np.all(np.abs(offset) <= _BIG_OFFSET):
            return None
        k = scale * (np.float32(1) / np.sqrt(variance + epsilon))
        self.coefficients = (scale, variance, offset, k)
        return k

    def _fed_key(self, step: Any) -> Any:
        """The key through which the chain's running value reaches ``step``."""
        index = self.chain.index(step)
        return (self.head if index == 0 else self.chain[index - 1]).outputs[0]


def fusion_groups(steps: list, fetch_keys: list, host: Any, step_class: type
                  ) -> list[tuple[Any, list]]:
    """The (head, chain) groups of ``steps``, formed from the plan's def-use edges before
    anything is rewritten, each step in at most one group.

    A chain grows from its head along the only use of the running value while the next op
    is the next stage (``STAGES``), runs on the host's native kernels and is not already in
    another group: an ``AddV2`` whose two inputs both end fusable chains (a projection
    shortcut) joins the first of them, and the other chain ends before it. A step that is a
    control input of another planned op is never fused (the group runs where its last op
    was, later than that step ran unfused), and no group ends where a value another step or
    a fetch sees is produced in its middle.
    """
    uses = Counter(key for step in steps if isinstance(step, step_class)
                   for key in step.inputs if key is not None)
    uses.update(key for key in fetch_keys)
    consumer = {key: step for step in steps if isinstance(step, step_class)
                for key in step.inputs if key is not None}
    controlling = {id(control) for step in steps if isinstance(step, step_class)
                   for control in step.op.control_inputs}
    claimed: set[int] = set()
    groups = []
    for step in steps:
        if not (isinstance(step, step_class) and step.op.type in HEADS
                and step.device is host and id(step.op) not in controlling
                and step.outputs and step.outputs[0] is not None
                and step.op.outputs[0].dtype.name == "float32"):
            continue
        chain: list = []
        key, last_stage = step.outputs[0], -1
        while uses[key] == 1 and key in consumer:
            nxt = consumer[key]
            stage = _stage(nxt.op)
            if (stage is None or stage <= last_stage or id(nxt) in claimed
                    or id(nxt.op) in controlling or nxt.device is not host
                    or nxt.op.inputs[0 if stage != 2 else nxt.inputs.index(key)] is not key[0]
                    or any(uses[out] for out in nxt.outputs[1:] if out is not None)
                    or nxt.outputs[0] is None):
                break
            if stage in (1, 3) and nxt.kernel_def.backend != "native":
                break
            chain.append(nxt)
            key, last_stage = nxt.outputs[0], stage
        if chain:
            claimed.update(id(s) for s in (step, *chain))
            groups.append((step, chain))
    return groups


def fuse_epilogues(steps: list, fetch_keys: list, host: Any, step_class: type) -> list:
    """``steps`` with each group of :func:`fusion_groups` replaced by one
    :class:`FusedStep`, placed where the chain's last op was (its other inputs are all
    computed by then)."""
    if host.backend != "native" or not native.available():
        return steps
    groups = fusion_groups(steps, fetch_keys, host, step_class)
    if not groups:
        return steps
    fused_at = {id(chain[-1]): FusedStep(head, chain) for head, chain in groups}
    absorbed = {id(s) for head, chain in groups for s in (head, *chain)}
    return [fused_at.get(id(step), step) for step in steps if id(step) not in absorbed
            or id(step) in fused_at]
