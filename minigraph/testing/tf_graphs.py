"""Graphs made by TensorFlow, for the interop tests and benchmarks (needs the ``oracle``
extra: tensorflow-cpu, and tf_keras for the Keras 2 models, whose BatchNormalization layers
are the fused ops; Keras 3 lowers them to elementwise ops).

Each builder returns a :class:`TFGraph`: the frozen ``GraphDef`` bytes as TensorFlow wrote
them, the values to feed, the tensors to fetch and what TensorFlow computed for them. Keras
models are frozen the way users do it (``convert_variables_to_constants_v2`` of a concrete
function called with ``training=False``); their weights are drawn at random, batch-norm
statistics included, so no layer is an identity.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TFGraph:
    """A TensorFlow graph with its inputs and TensorFlow's outputs."""

    name: str
    graph_def: bytes
    feeds: dict[str, np.ndarray]  # tensor name -> value
    fetches: list[str]  # tensor names
    expected: list[np.ndarray] = field(default_factory=list)
    producer: int | None = None


def tensorflow():
    """TensorFlow, imported quietly."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def keras():
    """Keras 2 (``tf_keras``), whose BatchNormalization is ``FusedBatchNormV3``."""
    tensorflow()
    import tf_keras

    return tf_keras


def _randomize(model, rng: np.random.Generator) -> None:
    """Random weights; variances (batch norm's moving ones, a Normalization layer's) in
    [0.5, 1.5] so they stay variances; integer weights (a Normalization's count) are kept."""
    for weight in model.weights:
        if not weight.dtype.is_floating:
            continue
        shape = tuple(weight.shape)
        if "variance" in weight.name:
            value = rng.uniform(0.5, 1.5, shape)
        else:
            fan_in = max(1, int(np.prod(shape[:-1])))
            value = rng.standard_normal(shape) * (1.0 / np.sqrt(fan_in) if len(shape) > 1
                                                  else 0.3)
        weight.assign(value.astype(np.float32))


def frozen_keras(name: str, model, input_shape: tuple[int, ...], batch: int = 4,
                 seed: int = 0, x: np.ndarray | None = None) -> TFGraph:
    """Freeze ``model`` with random weights for inference (batch dimension left unknown) and
    run it once on ``x`` (default: standard normal float32 of shape ``(batch,
    *input_shape)``; token ids for an Embedding, say, are given here, and set the input's
    dtype)."""
    rng = np.random.default_rng(seed)
    _randomize(model, rng)
    if x is None:
        x = rng.standard_normal((batch, *input_shape)).astype(np.float32)
    return freeze(name, model, [x])


def freeze(name: str, model, values: list[np.ndarray]) -> TFGraph:
    """Freeze ``model`` (its weights as they are) for inference with one input per array of
    ``values`` (their dtypes, the batch dimension left unknown) and run it on them."""
    tf = tensorflow()
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    specs = [tf.TensorSpec([None, *v.shape[1:]], tf.as_dtype(v.dtype)) for v in values]
    function = tf.function(
        lambda *xs: model(list(xs) if len(xs) > 1 else xs[0], training=False)
    ).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(function)
    outputs = frozen(*[tf.constant(v) for v in values])
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return TFGraph(name, frozen.graph.as_graph_def().SerializeToString(),
                   {t.name: v for t, v in zip(frozen.inputs, values)},
                   [t.name for t in frozen.outputs], [o.numpy() for o in outputs])


def run_frozen(model, x: np.ndarray, backend: str) -> tuple[set[str], np.ndarray, np.ndarray]:
    """``model`` frozen by TensorFlow (:func:`freeze`), imported into minigraph and run on
    ``x`` on ``backend``: (the graph's op types, minigraph's output, TensorFlow's)."""
    import minigraph as mg
    from minigraph.interop import protos

    graph = freeze("model", model, [x])
    types = {node.op for node in protos.GraphDef().FromString(graph.graph_def).node}
    ours = mg.ClientSession(mg.import_graph_def(graph.graph_def), backend=backend).Run(
        graph.feeds, graph.fetches)[0]
    return types, ours, graph.expected[0]


def keras_cnn() -> TFGraph:
    """Conv2D/BatchNormalization/ReLU/MaxPool twice, global pooling, Dense, Softmax."""
    k = keras()
    layers = k.layers
    model = k.Sequential([
        layers.Input((28, 28, 1)), layers.Conv2D(8, 3, padding="same"),
        layers.BatchNormalization(), layers.ReLU(), layers.MaxPool2D(),
        layers.Conv2D(16, 3), layers.BatchNormalization(), layers.Activation("relu"),
        layers.GlobalAveragePooling2D(), layers.Dense(10), layers.Softmax()])
    return frozen_keras("keras_cnn", model, (28, 28, 1))


def residual_stack(blocks: int = 3, width: int = 16, size: int = 32) -> TFGraph:
    """Residual blocks whose batch norms have ``scale=False`` or ``center=False``."""
    k = keras()
    layers = k.layers
    inputs = layers.Input((size, size, 3))
    h = layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    for _ in range(blocks):
        r = layers.Conv2D(width, 3, padding="same", use_bias=False)(h)
        r = layers.BatchNormalization(scale=False)(r)
        r = layers.ReLU()(r)
        r = layers.Conv2D(width, 3, padding="same", use_bias=False)(r)
        r = layers.BatchNormalization(center=False)(r)
        h = layers.ReLU()(layers.Add()([h, r]))
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(h))
    return frozen_keras("residual_stack", k.Model(inputs, outputs), (size, size, 3))


def projection_shortcut(size: int = 12, width: int = 8) -> TFGraph:
    """ResNet blocks whose shortcut is a strided 1x1 convolution with its own batch norm, so
    both inputs of the ``Add`` end a convolution -> batch-norm chain (then ReLU), as in
    ResNet50, ResNetV2 and RegNet."""
    k = keras()
    layers = k.layers
    inputs = layers.Input((size, size, 3))
    h = inputs
    for filters, stride in ((width, 1), (2 * width + 1, 2)):
        r = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(h)
        r = layers.BatchNormalization()(r)
        r = layers.ReLU()(r)
        r = layers.Conv2D(filters, 3, padding="same")(r)
        r = layers.BatchNormalization()(r)
        s = layers.Conv2D(filters, 1, strides=stride)(h)
        s = layers.BatchNormalization()(s)
        h = layers.ReLU()(layers.Add()([s, r]))
    outputs = layers.Dense(5)(layers.GlobalAveragePooling2D()(h))
    return frozen_keras("projection_shortcut", k.Model(inputs, outputs), (size, size, 3),
                        batch=2)


def mobilenet_v2(batch: int = 2) -> TFGraph:
    """MobileNetV2, alpha 0.35 at 96x96 (random weights; nothing is downloaded)."""
    k = keras()
    model = k.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None)
    return frozen_keras("mobilenet_v2", model, (96, 96, 3), batch=batch)


def conv3d_net() -> TFGraph:
    """Conv3D, BatchNormalization (NDHWC), ReLU, MaxPool3D, Flatten, Dense."""
    k = keras()
    layers = k.layers
    model = k.Sequential([
        layers.Input((8, 8, 8, 2)), layers.Conv3D(4, 3, padding="same"),
        layers.BatchNormalization(), layers.ReLU(), layers.MaxPool3D(), layers.Flatten(),
        layers.Dense(3)])
    return frozen_keras("conv3d_net", model, (8, 8, 8, 2))


def keras_grouped_convs() -> TFGraph:
    """Keras Conv2D and Conv1D layers with ``groups`` (TF 2.21 runs each as a jit-compiled
    function: a PartitionedCall of the GraphDef's library), a depthwise-like one (a group per
    channel) among them."""
    k = keras()
    layers = k.layers
    inputs = layers.Input((8, 8, 4))
    h = layers.Conv2D(6, 3, groups=2, padding="same")(inputs)
    h = layers.ReLU()(layers.BatchNormalization()(h))
    h = layers.Conv2D(6, 3, groups=6, strides=2)(h)
    h = layers.Conv2D(12, 1, groups=3, use_bias=False)(h)
    h = layers.Reshape((9, 12))(h)
    h = layers.Conv1D(8, 3, groups=4, padding="same")(h)
    outputs = layers.Dense(5)(layers.GlobalAveragePooling1D()(h))
    return frozen_keras("keras_grouped_convs", k.Model(inputs, outputs), (8, 8, 4), batch=2)


def keras_transposed_convs() -> TFGraph:
    """Conv2DTranspose (Conv2DBackpropInput of a computed output shape), Conv3DTranspose
    (Conv3DBackpropInputV2) and AveragePooling3D (AvgPool3D)."""
    k = keras()
    layers = k.layers
    inputs = layers.Input((5, 5, 3))
    h = layers.Conv2DTranspose(4, 3, strides=2, padding="same")(inputs)
    h = layers.Conv2DTranspose(2, 2, padding="valid")(h)  # 11 x 11 x 2
    h = layers.Reshape((11, 11, 2, 1))(h)
    h = layers.Conv3DTranspose(3, 3, strides=(1, 1, 2), padding="same")(h)
    outputs = layers.AveragePooling3D((2, 2, 2), padding="same")(h)
    return frozen_keras("keras_transposed_convs", k.Model(inputs, outputs), (5, 5, 3), batch=2)


def regnet_x002(batch: int = 2) -> TFGraph:
    """RegNetX002 at 64x64 (random weights): grouped 3x3 convolutions in library
    functions."""
    k = keras()
    model = k.applications.RegNetX002(input_shape=(64, 64, 3), weights=None)
    return frozen_keras("regnet_x002", model, (64, 64, 3), batch=batch)


def convnext_tiny(batch: int = 2) -> TFGraph:
    """ConvNeXtTiny at 32x32 (random weights): 7x7 convolutions grouped per channel in
    library functions, layer norms, GELU (Erfc), layer scale."""
    k = keras()
    model = k.applications.ConvNeXtTiny(input_shape=(32, 32, 3), weights=None)
    return frozen_keras("convnext_tiny", model, (32, 32, 3), batch=batch)


def convnext_like(width: int = 16, size: int = 32, batch: int = 2) -> TFGraph:
    """ConvNeXt's structure from layers whose ops need no more than convolutions: a 4x4
    stride-4 stem, blocks of a 7x7 convolution grouped per channel (a jit-compiled library
    function, as in ConvNeXtTiny), a normalization, a 1x1 expansion, an activation, a 1x1
    projection, a per-channel layer scale and the residual; a 2x2 stride-2 downsampling;
    global pooling and a classifier. (ConvNeXtTiny itself also needs layer normalization's
    and GELU's ops.)"""
    k = keras()
    layers = k.layers

    class LayerScale(layers.Layer):
        """ConvNeXt's learned per-channel scale of a block's output."""

        def build(self, input_shape):
            self.gamma = self.add_weight(name="gamma", shape=(input_shape[-1],))

        def call(self, x):
            return x * self.gamma

    def block(h, channels):
        r = layers.Conv2D(channels, 7, padding="same", groups=channels)(h)
        r = layers.BatchNormalization()(r)
        r = layers.ReLU()(layers.Conv2D(4 * channels, 1)(r))
        r = LayerScale()(layers.Conv2D(channels, 1)(r))
        return layers.Add()([h, r])

    inputs = layers.Input((size, size, 3))
    h = block(layers.Conv2D(width, 4, strides=4)(inputs), width)
    h = layers.Conv2D(2 * width, 2, strides=2)(layers.BatchNormalization()(h))
    h = block(block(h, 2 * width), 2 * width)
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(h))
    return frozen_keras("convnext_like", k.Model(inputs, outputs), (size, size, 3),
                        batch=batch)


def keras_dilated_convs() -> TFGraph:
    """Dilated Keras convolutions: Conv1D causal and SAME, Conv2D (TF writes them as
    SpaceToBatchND -> Conv2D -> BatchToSpaceND) and a dilated grouped Conv2D (a library
    function)."""
    k = keras()
    layers = k.layers
    inputs = layers.Input((16, 4))
    h = layers.Conv1D(4, 3, padding="causal", dilation_rate=2)(inputs)
    h = layers.Conv1D(4, 3, padding="same", dilation_rate=3)(h)
    h = layers.Reshape((4, 4, 4))(h)
    h = layers.Conv2D(6, 3, padding="same", dilation_rate=2)(h)
    outputs = layers.Conv2D(4, 2, padding="same", dilation_rate=2, groups=2)(h)
    return frozen_keras("keras_dilated_convs", k.Model(inputs, outputs), (16, 4), batch=2)


def nested_functions() -> TFGraph:
    """tf.functions calling tf.functions: a two-result function called at two depths, its
    second result read by the caller's consumers and returned."""
    tf = tensorflow()
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)

    @tf.function
    def inner(a, b):
        return a * b, a - b

    @tf.function
    def middle(a):
        product, difference = inner(a, 2.0 * a)
        return tf.nn.relu(product + difference)

    def outer(x):
        y = middle(x)
        product, difference = inner(y, x)
        return product + difference, difference

    return _concrete("nested_functions", outer, [tf.TensorSpec(x.shape, tf.float32)], [x])


def keras_layout_layers(batch: int = 3) -> TFGraph:
    """The layout ops Keras layers freeze to: Embedding (GatherV2), Concatenate (ConcatV2),
    ZeroPadding2D and Cropping2D (Pad, StridedSlice), a dilated DepthwiseConv2D
    (SpaceToBatchND, BatchToSpaceND), and Lambda layers with tf.split (Split, SplitV),
    tf.reverse, tf.pad(mode="REFLECT") (MirrorPad), space_to_depth/depth_to_space,
    tf.stop_gradient, tf.one_hot and tf.range."""
    tf, k = tensorflow(), keras()
    layers = k.layers
    image, tokens = layers.Input((8, 8, 4)), layers.Input((5,), dtype="int32")
    embedded = layers.Embedding(10, 4)(tokens)
    framed = layers.Cropping2D(((1, 1), (2, 0)))(layers.ZeroPadding2D(((1, 1), (0, 2)))(image))
    dilated = layers.DepthwiseConv2D(3, dilation_rate=2, padding="same")(image)
    joined = layers.Concatenate()([image, framed, dilated])

    def shuffle(t):
        a, b, c = tf.split(t, [4, 4, -1], axis=-1)
        top, bottom = tf.split(a, 2, axis=1)
        mirrored = tf.pad(tf.reverse(b, [1, 2]), [[0, 0], [1, 1], [2, 2], [0, 0]],
                          mode="REFLECT")
        deep = tf.nn.depth_to_space(tf.nn.space_to_depth(c, 2), 2)
        return tf.concat([tf.concat([bottom, top], 1), deep,
                          tf.stop_gradient(mirrored[:, 1:-1, 2:-2])], -1)

    def hot(t):
        return tf.one_hot(t, 10, on_value=0.5, off_value=-0.5) * tf.cast(tf.range(10),
                                                                          tf.float32)

    mixed = layers.Lambda(shuffle)(joined)
    encoded = layers.Lambda(hot)(tokens)
    features = layers.Concatenate()([layers.Flatten()(mixed), layers.Flatten()(embedded),
                                     layers.Flatten()(encoded)])
    model = k.Model([image, tokens], layers.Dense(6)(features))
    rng = np.random.default_rng(11)
    _randomize(model, rng)
    return freeze("keras_layout_layers", model,
                  [rng.standard_normal((batch, 8, 8, 4)).astype(np.float32),
                   rng.integers(0, 10, (batch, 5)).astype(np.int32)])


def layout_raw_ops() -> TFGraph:
    """The layout ops no Keras layer writes, as raw ops: IdentityN, Snapshot,
    PreventGradient, the old Concat, ConcatOffset, GatherV2 with batch_dims,
    UnsortedSegmentSum, MirrorPadGrad, a float Range, BatchToSpaceND with crops."""
    tf = tensorflow()
    raw = tf.raw_ops
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 4, 6, 3)).astype(np.float32)
    ids = np.array([[1, 3], [0, 0]], np.int64)

    def body(x, ids):
        a, n = raw.IdentityN(input=[x, ids])
        joined = raw.Concat(concat_dim=2, values=[raw.Snapshot(input=a),
                                                  raw.PreventGradient(input=a, message="m")])
        offsets = raw.ConcatOffset(concat_dim=2, shape=[tf.shape(a), tf.shape(a)])
        picked = raw.GatherV2(params=x, indices=n, axis=tf.constant(2, tf.int64),
                              batch_dims=1)
        summed = raw.UnsortedSegmentSum(data=x[:, 0], segment_ids=tf.constant([1, -1]),
                                        num_segments=tf.constant(3, tf.int64))
        folded = raw.MirrorPadGrad(input=x, paddings=[[0, 0], [1, 1], [1, 2], [0, 0]],
                                   mode="SYMMETRIC")
        steps = raw.Range(start=tf.constant(0.5), limit=tf.constant(3.0),
                          delta=tf.constant(0.25))
        spread = raw.BatchToSpaceND(input=tf.concat([x, x], 0), block_shape=[2, 1],
                                    crops=[[1, 0], [0, 2]])
        return joined, offsets[0], offsets[1], picked, summed, folded, steps, spread

    return _concrete("layout_raw_ops", body, [tf.TensorSpec([None, 4, 6, 3], tf.float32),
                                              tf.TensorSpec([2, 2], tf.int64)], [x, ids])


def _concrete(name: str, body: Callable, specs: list, values: list[np.ndarray]) -> TFGraph:
    """The graph of ``tf.function(body)`` for ``specs`` (placeholders), run on ``values``."""
    tf = tensorflow()
    function = tf.function(body).get_concrete_function(*specs)
    outputs = function(*[tf.constant(v) for v in values])
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    feeds = {t.name: v for t, v in zip(function.inputs, values)}
    return TFGraph(name, function.graph.as_graph_def().SerializeToString(), feeds,
                   [t.name for t in function.outputs], [o.numpy() for o in outputs])


def nchw_conv_net(batch: int = 2, size: int = 9, width: int = 6) -> TFGraph:
    """A channels-first CNN as TF writes it for a GPU: ``Conv2D -> BiasAdd -> Relu ->
    MaxPool -> Conv2D (stride 2) -> FusedBatchNormV3 (inference) -> Relu -> AvgPool``, all
    NCHW, with the gradients of ``sum(y * y)`` w.r.t. the input and both filters
    (Conv2DBackpropInput/Filter, MaxPoolGrad, AvgPoolGrad, BiasAddGrad in NCHW). Traced
    only: TF's CPU kernels refuse NCHW convolutions and pools, so ``expected`` is empty
    (the layout pass's tests compare minigraph's plans with each other)."""
    tf = tensorflow()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    values = [rng.standard_normal((3, 3, 3, width)) * 0.3,
              rng.standard_normal((3, 3, width, width)) * 0.3, rng.standard_normal(width),
              *(rng.uniform(0.5, 1.5, width) for _ in range(4))]

    def net(x):
        f1, f2, bias, *stats = (tf.constant(v.astype(np.float32)) for v in values)
        with tf.GradientTape() as tape:
            tape.watch([x, f1, f2])
            h = tf.nn.conv2d(x, f1, 1, "SAME", data_format="NCHW")
            h = tf.nn.relu(tf.nn.bias_add(h, bias, data_format="NCHW"))
            h = tf.nn.max_pool2d(h, 2, 2, "SAME", data_format="NCHW")
            h = tf.nn.conv2d(h, f2, 2, "SAME", data_format="NCHW")
            h = tf.raw_ops.FusedBatchNormV3(x=h, scale=stats[0], offset=stats[1],
                                            mean=stats[2], variance=stats[3], epsilon=1e-3,
                                            data_format="NCHW", is_training=False)[0]
            y = tf.nn.avg_pool2d(tf.nn.relu(h), 2, 1, "VALID", data_format="NCHW")
            loss = tf.reduce_sum(y * y)
        return (y, *tape.gradient(loss, [x, f1, f2]))

    spec = tf.TensorSpec(x.shape, tf.float32)
    function = tf.function(net).get_concrete_function(spec)
    return TFGraph("nchw_conv_net", function.graph.as_graph_def().SerializeToString(),
                   {function.inputs[0].name: x}, [t.name for t in function.outputs])


def batch_norm_training(data_format: str = "NHWC", dtype: str = "float32") -> TFGraph:
    """A training step's batch norm: ``FusedBatchNormV3(is_training=True)`` feeding its
    reserve spaces to ``FusedBatchNormGradV3`` (the raw ops, as a Keras model called with
    ``training=True`` cannot be frozen)."""
    tf = tensorflow()
    rng = np.random.default_rng(1)
    shape = (4, 3, 5, 6) if data_format == "NCHW" else (4, 5, 6, 3)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    scale, offset = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)

    def step(x, dy):
        f32 = np.float32
        y, mean, var, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=tf.constant(scale.astype(f32)), offset=tf.constant(offset.astype(f32)),
            mean=tf.constant([], tf.float32), variance=tf.constant([], tf.float32),
            epsilon=1e-3, exponential_avg_factor=1.0, data_format=data_format,
            is_training=True)
        dx, dscale, doffset, _, _ = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=tf.constant(scale.astype(f32)), reserve_space_1=r1,
            reserve_space_2=r2, reserve_space_3=r3, epsilon=1e-3, data_format=data_format,
            is_training=True)
        return y, mean, var, dx, dscale, doffset

    spec = tf.TensorSpec(shape, getattr(tf, dtype))
    return _concrete(f"bn_training_{data_format}_{dtype}", step, [spec, spec], [x, dy])


def batch_norm_inference(data_format: str, dtype: str) -> TFGraph:
    """``FusedBatchNormV3`` for inference with given statistics, and (channels-last only:
    TF's CPU kernel refuses channels-first inference gradients) its gradient op."""
    tf = tensorflow()
    rng = np.random.default_rng(2)
    shape = (2, 4, 3, 5) if data_format == "NCHW" else (2, 3, 5, 4)
    x = rng.standard_normal(shape).astype(dtype)
    stats = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]

    def infer(x):
        scale, offset, mean, var = (tf.constant(s) for s in stats)
        y = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=mean,
                                        variance=var, epsilon=1e-3, data_format=data_format,
                                        is_training=False)[0]
        if data_format == "NCHW":
            return (y,)
        grads = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=y, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
            reserve_space_3=tf.constant([], tf.float32), epsilon=1e-3,
            data_format=data_format, is_training=False)
        return y, grads[0], grads[1], grads[2]

    return _concrete(f"bn_inference_{data_format}_{dtype}", infer,
                     [tf.TensorSpec(shape, getattr(tf, dtype))], [x])


def batch_norm_v1_v2() -> TFGraph:
    """The older fused ops: FusedBatchNorm, FusedBatchNormV2 and their gradients."""
    tf = tensorflow()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, offset = rng.uniform(0.5, 1.5, 5).astype(np.float32), rng.standard_normal(5)

    def body(x):
        s, o = tf.constant(scale), tf.constant(offset.astype(np.float32))
        empty = tf.constant([], tf.float32)
        y1, m1, v1, r11, r12 = tf.raw_ops.FusedBatchNorm(x=x, scale=s, offset=o, mean=empty,
                                                         variance=empty, is_training=True)
        y2, m2, v2, r21, r22 = tf.raw_ops.FusedBatchNormV2(x=x, scale=s, offset=o, mean=empty,
                                                           variance=empty, is_training=True)
        g1 = tf.raw_ops.FusedBatchNormGrad(y_backprop=y2, x=x, scale=s, reserve_space_1=r11,
                                           reserve_space_2=r12, is_training=True)
        g2 = tf.raw_ops.FusedBatchNormGradV2(y_backprop=y1, x=x, scale=s, reserve_space_1=r21,
                                             reserve_space_2=r22, is_training=True)
        return y1, m1, v1, y2, m2, v2, g1[0], g1[1], g1[2], g2[0], g2[1], g2[2]

    return _concrete("bn_v1_v2", body, [tf.TensorSpec(x.shape, tf.float32)], [x])


def index_and_list_ops() -> TFGraph:
    """The plumbing TF graphs carry around a model: AddN, Shape/Size with ``out_type``,
    Fill with int64 dims, Transpose/Reshape/Sum/Mean with int64 index inputs, BroadcastTo,
    InvertPermutation, BroadcastGradientArgs."""
    tf = tensorflow()
    x = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)

    def body(x):
        i64 = tf.int64
        total = tf.raw_ops.AddN(inputs=[x, x * 2.0, x])
        shape64 = tf.raw_ops.Shape(input=total, out_type=i64)
        size64 = tf.raw_ops.Size(input=total, out_type=i64)
        filled = tf.raw_ops.Fill(dims=tf.constant([2, 2], i64), value=tf.constant(1.5))
        moved = tf.raw_ops.Transpose(x=total, perm=tf.constant([2, 0, 1], i64))
        flat = tf.raw_ops.Reshape(tensor=moved, shape=tf.constant([4, -1], i64))
        summed = tf.raw_ops.Sum(input=flat, axis=tf.constant([1], i64), keep_dims=True)
        mean = tf.raw_ops.Mean(input=x, axis=tf.constant(-1))  # Python's name for the input
        wide = tf.raw_ops.BroadcastTo(input=mean, shape=tf.constant([3, 2, 3], i64))
        inverse = tf.raw_ops.InvertPermutation(x=tf.constant([2, 0, 1], i64))
        r0, r1 = tf.raw_ops.BroadcastGradientArgs(s0=tf.constant([2, 1, 4], i64),
                                                  s1=tf.constant([3, 1], i64))
        return total, shape64, size64, filled, summed, wide, inverse, r0, r1

    return _concrete("index_and_list_ops", body, [tf.TensorSpec(x.shape, tf.float32)], [x])


def global_normalization_producer_8() -> TFGraph:
    """BatchNormWithGlobalNormalization and its Grad, in a graph of producer version 8
    (TF 2.21 only builds them there: importing an empty producer-8 GraphDef first lowers
    the graph's version)."""
    tf = tensorflow()
    rng = np.random.default_rng(4)
    t = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    m, beta, gamma, backprop = (rng.standard_normal(s).astype(np.float32)
                                for s in (4, 4, 4, t.shape))
    v = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        old = tf.compat.v1.GraphDef()
        old.versions.producer = 8
        tf.graph_util.import_graph_def(old, name="")
        t_in = tf.compat.v1.placeholder(tf.float32, t.shape, name="t")
        consts = [tf.constant(a) for a in (m, v, beta, gamma, backprop)]
        y = tf.raw_ops.BatchNormWithGlobalNormalization(
            t=t_in, m=consts[0], v=consts[1], beta=consts[2], gamma=consts[3],
            variance_epsilon=1e-3, scale_after_normalization=True)
        grads = tf.raw_ops.BatchNormWithGlobalNormalizationGrad(
            t=t_in, m=consts[0], v=consts[1], gamma=consts[3], backprop=consts[4],
            variance_epsilon=1e-3, scale_after_normalization=True)
        fetches = [y, *grads]
    with tf.compat.v1.Session(graph=graph) as session:
        expected = session.run(fetches, {t_in: t})
    graph_def = graph.as_graph_def()
    return TFGraph("global_norm_producer_8", graph_def.SerializeToString(), {"t:0": t},
                   [f.name for f in fetches], expected, graph_def.versions.producer)


def stripped_default_attrs(graph_def: bytes) -> bytes:
    """The GraphDef with every attr that equals its default removed, as
    ``export_meta_graph(strip_default_attrs=True)`` writes graphs."""
    tf = tensorflow()
    from tensorflow.python.framework import meta_graph

    meta = tf.compat.v1.MetaGraphDef()
    meta.graph_def.ParseFromString(graph_def)
    meta_graph.strip_graph_default_valued_attrs(meta)
    return meta.graph_def.SerializeToString()


def with_output_shapes(graph_def: bytes) -> bytes:
    """The GraphDef as TF writes it with ``add_shapes=True`` (an ``_output_shapes`` attr on
    every node)."""
    tf = tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph_def), name="")
    return graph.as_graph_def(add_shapes=True).SerializeToString()


def as_text(graph_def: bytes) -> str:
    """The GraphDef in protobuf text format, as ``tf.io.write_graph(as_text=True)``."""
    tf = tensorflow()
    from google.protobuf import text_format

    return text_format.MessageToString(tf.compat.v1.GraphDef.FromString(graph_def))


def reversed_nodes(graph_def: bytes) -> bytes:
    """The GraphDef with its nodes in reverse order (consumers before producers)."""
    tf = tensorflow()
    parsed = tf.compat.v1.GraphDef.FromString(graph_def)
    nodes = list(parsed.node)[::-1]
    del parsed.node[:]
    parsed.node.extend(nodes)
    return parsed.SerializeToString()


def run_graph_def(graph_def: bytes, feeds: dict[str, np.ndarray], fetches: list[str]
                  ) -> list[np.ndarray]:
    """Run a GraphDef in TensorFlow (a v1 Session; grappler on)."""
    tf = tensorflow()
    parsed = tf.compat.v1.GraphDef.FromString(graph_def)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(parsed, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(fetches, feeds)
