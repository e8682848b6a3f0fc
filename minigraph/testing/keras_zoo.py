"""The Keras zoo: one model of every ``tf_keras.applications`` family and a block of each
common Keras layer, frozen by TensorFlow (needs the ``oracle`` extra on a cold cache).

Every entry is frozen the way :func:`minigraph.testing.tf_graphs.frozen_keras` freezes
Keras models (random weights, ``training=False``, batch dimension unknown) and run by
TensorFlow once, on a batch of :data:`BATCH`, with grappler's remapper off
(:func:`remapper_off` says why). Applications are built with
``weights=None`` (nothing is downloaded) and ``classifier_activation=None``: their logits
are compared, since a softmax of random-weight logits is close to one-hot and would hide
errors in everything before it.

Freezing takes TensorFlow 0.1-50 s an entry (2 busy cores), so :func:`load` keeps what it
made in a disk cache (``$MINIGRAPH_TF_CACHE``, default ``~/.cache/minigraph/keras_zoo``): one
``.npz`` per entry holding the GraphDef bytes, the feeds, the fetch names and TensorFlow's outputs,
named by the entry, the TensorFlow and tf_keras versions and a digest of the source that
builds it (the entry's functions and every helper of this package they call, so editing
a builder or ``frozen_keras`` rebuilds). A warm cache needs no TensorFlow at all; an
entry that does not read back whole (truncated, not a zip, wrong checksum) is rebuilt.

Entries have a ``kind``: ``application`` and ``layers`` make up the zoo the tests run
(``ci=False`` ones only with ``--zoo-full``); ``vocabulary`` entries are the rest of
Keras's layers (string preprocessing among them), frozen to list the ops they need
(``tools/keras_zoo_report.py``), not tested.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from minigraph.testing.tf_graphs import TFGraph, frozen_keras, keras, tensorflow

BATCH = 2
KINDS = ("application", "layers", "vocabulary")


@dataclass(frozen=True)
class ZooEntry:
    """How to build one frozen Keras model.

    ``model()`` returns the Keras model; its input is ``(BATCH, *input_shape)`` float32,
    or int32 token ids below ``tokens`` when that is set (an Embedding's input).
    """

    name: str
    kind: str
    model: Callable[[], Any]
    input_shape: tuple[int, ...]
    tokens: int = 0
    ci: bool = True

    def build(self) -> TFGraph:
        """Freeze the model and run it in TensorFlow (slow: seconds), grappler's remapper
        off (see :func:`remapper_off`)."""
        keras().backend.clear_session()  # node names do not depend on what came before
        x = None
        if self.tokens:
            x = np.random.default_rng(1).integers(0, self.tokens, (BATCH, *self.input_shape),
                                                  dtype=np.int32)
        with remapper_off():
            return frozen_keras(self.name, self.model(), self.input_shape, batch=BATCH, x=x)

    def digest(self) -> str:
        """A hash of everything that decides the graph: the source of the functions that
        build it, the arguments they are given, the input's shape and kind."""
        sources = _sources(functools.partial(ZooEntry.build, self.model))
        text = "\n".join([*sources, repr((self.input_shape, self.tokens, BATCH))])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


ZOO: dict[str, ZooEntry] = {}


@contextlib.contextmanager
def remapper_off():
    """TensorFlow runs graphs without grappler's remapper inside the block.

    The remapper's oneDNN layer-norm fusion computes a frozen LayerNormalization with
    epsilon 1e-5 or 1e-6 (ConvNeXt's) as if epsilon were 1e-3 (1e-4 and larger are kept):
    1e-3 from the float64 result and from TF's own unfused kernels (TF 2.21, CPU), which
    the oracle therefore runs one by one.
    """
    tf = tensorflow()
    before = tf.config.optimizer.get_experimental_options().get("remapping", True)
    tf.config.optimizer.set_experimental_options({"remapping": False})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"remapping": before})


def _register(entry: ZooEntry) -> None:
    assert entry.kind in KINDS and entry.name not in ZOO, entry
    ZOO[entry.name] = entry


def entries(kind: str | None = None, *, full: bool = True) -> list[ZooEntry]:
    """The entries of ``kind`` (default: every kind), only the CI ones unless ``full``."""
    return [e for e in ZOO.values()
            if (kind is None or e.kind == kind) and (full or e.ci)]


# ----------------------------------------------------------------------------- the source digest


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (lambdas and nested functions included) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _sources(root: Any) -> list[str]:
    """The source of ``root`` (a function or ``functools.partial``) and of every function of
    ``minigraph.testing`` it reaches through globals or arguments; ``repr`` of other
    arguments. Sorted, so the digest does not depend on the walk's order."""
    seen: set[int] = set()
    texts: list[str] = []
    queue = [root]
    while queue:
        item = queue.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, functools.partial):
            queue.extend([item.func, *item.args, *item.keywords.values()])
        elif inspect.isfunction(item):
            texts.append(inspect.getsource(item))
            for name in sorted(_code_names(item.__code__)):
                target = item.__globals__.get(name)
                if inspect.isfunction(target) and target.__module__.startswith(
                        "minigraph.testing"):
                    queue.append(target)
        else:
            texts.append(repr(item))
    return sorted(texts)


# ----------------------------------------------------------------------------- the disk cache


def cache_dir() -> Path:
    """``$MINIGRAPH_TF_CACHE``, or ``~/.cache/minigraph/keras_zoo``."""
    configured = os.environ.get("MINIGRAPH_TF_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "minigraph" / "keras_zoo"


def _version(*distributions: str) -> str:
    """The installed version of the first of ``distributions`` found (read from package
    metadata: importing TensorFlow takes seconds), or ``none``."""
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none"


def cache_path(entry: ZooEntry) -> Path:
    tf_version = _version("tensorflow", "tensorflow-cpu")
    keras_version = _version("tf-keras")
    return cache_dir() / f"{entry.name}--tf{tf_version}-k{keras_version}--{entry.digest()}.npz"


def _write(path: Path, graph: TFGraph) -> None:
    """Store ``graph`` at ``path`` atomically (a temporary file renamed: a reader never
    sees half a file, and concurrent writers leave one whole one)."""
    meta = {"name": graph.name, "feeds": list(graph.feeds), "fetches": graph.fetches,
            "producer": graph.producer, "sha256": hashlib.sha256(graph.graph_def).hexdigest()}
    arrays = {"graph_def": np.frombuffer(graph.graph_def, np.uint8),
              "meta": np.array(json.dumps(meta))}
    arrays.update({f"feed_{i}": value for i, value in enumerate(graph.feeds.values())})
    arrays.update({f"expected_{i}": value for i, value in enumerate(graph.expected)})
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as file:
        np.savez(file, **arrays)
    os.replace(temporary, path)


def _read(path: Path) -> TFGraph | None:
    """The graph stored at ``path``; None when it is missing or does not read back whole."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            meta = json.loads(str(stored["meta"]))
            graph_def = stored["graph_def"].tobytes()
            if hashlib.sha256(graph_def).hexdigest() != meta["sha256"]:
                return None
            feeds = {name: stored[f"feed_{i}"] for i, name in enumerate(meta["feeds"])}
            expected = [stored[f"expected_{i}"] for i in range(len(meta["fetches"]))]
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None
    return TFGraph(meta["name"], graph_def, feeds, list(meta["fetches"]), expected,
                   meta["producer"])


def load(name: str, size: int | None = None) -> TFGraph:
    """The entry ``name`` frozen (an application at ``size`` x ``size``: see
    :func:`application_at`), from the cache when it holds it, else built by TensorFlow and
    stored (older entries of the same name, for other versions or sources, removed)."""
    entry = ZOO[name] if size is None else application_at(name, size)
    path = cache_path(entry)
    graph = _read(path)
    if graph is None:
        graph = entry.build()
        for stale in path.parent.glob(f"{entry.name}--*.npz"):
            stale.unlink(missing_ok=True)
        _write(path, graph)
    return graph


def batch_feeds(graph: TFGraph, batch: int) -> dict[str, np.ndarray]:
    """The graph's feeds with ``batch`` rows (its rows repeated; token ids stay ids), for the
    benchmarks and profilers that run a zoo graph at other batch sizes."""
    feeds = {}
    for name, value in graph.feeds.items():
        reps = -(-batch // value.shape[0])
        feeds[name] = np.ascontiguousarray(np.concatenate([value] * reps)[:batch])
    return feeds


# ----------------------------------------------------------------------------- comparison


def tolerance(expected: np.ndarray, ulps: int) -> float:
    """The largest |minigraph - TensorFlow| accepted for one output: ``ulps`` float32 ulps
    of 1 (2**-23) times the output's largest magnitude (at least 1). Errors of a float32
    network are rounding errors of its largest intermediate sums, which scale with the
    output, not with each element; TF's oneDNN kernels sum in another order."""
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return ulps * 2.0 ** -23 * scale


def max_abs_diff(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The largest |actual - expected| over every output (inf on a shape mismatch)."""
    worst = 0.0
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            return float("inf")
        if e.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - e))))
    return worst


# ----------------------------------------------------------------------------- applications

class Application(NamedTuple):
    """A zoo application: the ``tf_keras.applications`` constructor, the input size, whether
    it is in the CI set, and the constructor's other arguments (a variant's width or depth)."""

    constructor: str
    size: int
    ci: bool
    options: tuple[tuple[str, Any], ...] = ()


# zoo name -> Application. The CI set has one model of every family and the variants that
# cost little (narrow widths: 8-24 channels where kernels are tuned on 32 and more); the
# other variants (deeper, wider) run with ``--zoo-full`` and in ``benchmarks/keras_zoo.py
# --all``. Variants have channel counts, depths and shapes no kernel choice was tuned on.
APPLICATIONS: dict[str, Application] = {
    "resnet50": Application("ResNet50", 64, True),
    "resnet50_v2": Application("ResNet50V2", 64, True),
    "resnet_rs50": Application("ResNetRS50", 64, True),
    "vgg16": Application("VGG16", 32, True),
    "vgg19": Application("VGG19", 32, False),  # VGG16's layers, three convolutions more
    "mobilenet": Application("MobileNet", 96, True),
    "mobilenet_v2": Application("MobileNetV2", 96, True),
    "mobilenet_v3_small": Application("MobileNetV3Small", 96, True),
    "mobilenet_v3_large": Application("MobileNetV3Large", 96, True),
    "efficientnet_b0": Application("EfficientNetB0", 64, True),
    "efficientnet_v2_b0": Application("EfficientNetV2B0", 64, True),
    "densenet121": Application("DenseNet121", 64, True),
    "inception_v3": Application("InceptionV3", 75, True),
    "inception_resnet_v2": Application("InceptionResNetV2", 75, True),
    "xception": Application("Xception", 71, True),
    "nasnet_mobile": Application("NASNetMobile", 32, True),
    "convnext_tiny": Application("ConvNeXtTiny", 32, True),
    "regnet_x002": Application("RegNetX002", 64, True),
    "regnet_y002": Application("RegNetY002", 64, True),
    # variants
    "resnet101": Application("ResNet101", 64, False),
    "resnet152_v2": Application("ResNet152V2", 64, False),
    "resnet_rs101": Application("ResNetRS101", 64, False),
    "densenet169": Application("DenseNet169", 64, False),
    "efficientnet_b3": Application("EfficientNetB3", 64, False),
    "efficientnet_v2_s": Application("EfficientNetV2S", 64, False),
    "convnext_small": Application("ConvNeXtSmall", 32, False),
    "regnet_x016": Application("RegNetX016", 64, False),
    "regnet_y008": Application("RegNetY008", 64, True),
    "mobilenet_v3_small_minimalistic": Application("MobileNetV3Small", 96, True,
                                                   (("minimalistic", True),)),
    "mobilenet_alpha_025": Application("MobileNet", 96, True, (("alpha", 0.25),)),
    "mobilenet_v2_alpha_035": Application("MobileNetV2", 96, True, (("alpha", 0.35),)),
}


def application(constructor: str, size: int, options: tuple[tuple[str, Any], ...] = ()):
    """``tf_keras.applications.<constructor>`` for ``size`` x ``size`` RGB images, random
    weights, logits out, with the constructor's other arguments ``options``."""
    return getattr(keras().applications, constructor)(
        input_shape=(size, size, 3), weights=None, classifier_activation=None,
        **dict(options))


def application_at(name: str, size: int) -> ZooEntry:
    """The zoo's application ``name`` at ``size`` x ``size`` RGB input instead of its own
    (named ``name@size``), for benchmarks and checks at input sizes nobody tuned for. Each
    family has its own smallest size (Keras raises below it, e.g. 75 for InceptionV3)."""
    if name not in APPLICATIONS:
        raise ValueError(f"{name!r} is not an application of the zoo "
                         f"(one of {', '.join(APPLICATIONS)})")
    spec = APPLICATIONS[name]
    if size == spec.size:
        return ZOO[name]
    return ZooEntry(f"{name}@{size}", "application",
                    functools.partial(application, spec.constructor, size, spec.options),
                    (size, size, 3), ci=False)


def _register_applications() -> None:
    for name, spec in APPLICATIONS.items():
        _register(ZooEntry(name, "application",
                           functools.partial(application, spec.constructor, spec.size,
                                             spec.options),
                           (spec.size, spec.size, 3), ci=spec.ci))


_register_applications()


# ----------------------------------------------------------------------------- layer blocks


def functional(body: Callable, input_shape: tuple[int, ...], tokens: int):
    """A functional Keras model: ``body(tf_keras, inputs)`` gives its outputs."""
    k = keras()
    inputs = k.Input(input_shape, dtype="int32" if tokens else "float32")
    return k.Model(inputs, body(k, inputs))


def block(input_shape: tuple[int, ...], *, kind: str = "layers", tokens: int = 0,
          ci: bool = True):
    """Register ``body(tf_keras, inputs) -> outputs`` as the zoo entry of its name."""

    def register(body: Callable) -> Callable:
        _register(ZooEntry(body.__name__, kind,
                           functools.partial(functional, body, input_shape, tokens),
                           input_shape, tokens, ci))
        return body

    return register


@block((5, 8))
def dense_3d(k, x):
    """Dense on a 3-D input (a tensordot over the last axis), then with a ReLU."""
    return k.layers.Dense(6, activation="relu")(k.layers.Dense(12)(x))


@block((6, 8))
def layer_normalization(k, x):
    """LayerNormalization over the last axis (epsilon 1e-3, and ConvNeXt's 1e-6), then over
    the last two."""
    x = k.layers.LayerNormalization()(x)
    x = k.layers.LayerNormalization(epsilon=1e-6)(x)
    return k.layers.LayerNormalization(axis=(1, 2), epsilon=1e-5)(x)


@block((6, 8))
def multi_head_attention(k, x):
    """Self-attention, two heads, with its output projection and a residual."""
    attended = k.layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    return k.layers.Add()([x, attended])


@block((6, 8))
def gelu_exact(k, x):
    """GELU as x * Phi(x) (the erf form)."""
    return k.layers.Activation(k.activations.gelu)(k.layers.Dense(8)(x))


@block((6, 8))
def gelu_tanh(k, x):
    """GELU's tanh approximation."""
    gelu = functools.partial(k.activations.gelu, approximate=True)
    return k.layers.Lambda(gelu)(k.layers.Dense(8)(x))


@block((16, 4))
def conv1d_causal_dilated(k, x):
    """Conv1D with causal padding, then a dilated one (rate 2), then a strided valid one."""
    x = k.layers.Conv1D(6, 3, padding="causal", activation="relu")(x)
    x = k.layers.Conv1D(6, 3, padding="causal", dilation_rate=2)(x)
    return k.layers.Conv1D(5, 3, strides=2)(x)


@block((16, 4))
def separable_conv1d(k, x):
    """SeparableConv1D, depth multiplier 2, same padding."""
    return k.layers.SeparableConv1D(6, 3, padding="same", depth_multiplier=2)(x)


@block((10, 10, 4))
def separable_conv2d(k, x):
    """SeparableConv2D, then a strided one."""
    x = k.layers.SeparableConv2D(6, 3, padding="same", activation="relu")(x)
    return k.layers.SeparableConv2D(5, 3, strides=2)(x)


@block((6, 6, 4))
def conv2d_transpose(k, x):
    """Conv2DTranspose, stride 2 with same padding, then stride 1 valid."""
    x = k.layers.Conv2DTranspose(6, 3, strides=2, padding="same")(x)
    return k.layers.Conv2DTranspose(3, 2)(x)


@block((5, 6, 3))
def upsampling2d_nearest(k, x):
    """UpSampling2D, nearest, by (2, 3)."""
    return k.layers.UpSampling2D((2, 3))(x)


@block((5, 6, 3))
def upsampling2d_bilinear(k, x):
    """UpSampling2D, bilinear, by 2."""
    return k.layers.UpSampling2D(2, interpolation="bilinear")(x)


@block((8, 8, 3))
def padding_cropping(k, x):
    """ZeroPadding2D (asymmetric), a Conv2D, Cropping2D (asymmetric)."""
    x = k.layers.ZeroPadding2D(((1, 2), (0, 3)))(x)
    x = k.layers.Conv2D(4, 3)(x)
    return k.layers.Cropping2D(((1, 0), (2, 1)))(x)


@block((8, 8, 3))
def concatenate(k, x):
    """Two convolution branches concatenated on channels, then on rows."""
    a = k.layers.Conv2D(4, 3, padding="same")(x)
    b = k.layers.Conv2D(2, 1)(x)
    channels = k.layers.Concatenate()([a, b, x])
    return k.layers.Concatenate(axis=1)([channels, channels])


@block((12,))
def add_multiply(k, x):
    """Add and Multiply of three Dense branches."""
    a, b, c = (k.layers.Dense(8)(x) for _ in range(3))
    return k.layers.Multiply()([k.layers.Add()([a, b]), c])


@block((8, 8, 3))
def pooling2d(k, x):
    """MaxPooling2D and AveragePooling2D (valid and same), global average and max pooling."""
    maxed = k.layers.MaxPooling2D(2)(x)
    averaged = k.layers.AveragePooling2D(3, strides=2, padding="same")(x)
    pooled = k.layers.Concatenate()([k.layers.GlobalAveragePooling2D()(maxed),
                                     k.layers.GlobalMaxPooling2D()(averaged)])
    return pooled


@block((12, 4))
def pooling1d(k, x):
    """MaxPooling1D and AveragePooling1D, global average and max pooling over time."""
    maxed = k.layers.MaxPooling1D(2)(x)
    averaged = k.layers.AveragePooling1D(3, strides=2, padding="same")(x)
    return k.layers.Concatenate()([k.layers.GlobalAveragePooling1D()(maxed),
                                   k.layers.GlobalMaxPooling1D()(averaged)])


@block((6, 10))
def softmax(k, x):
    """Softmax over the last axis, and over axis 1."""
    return k.layers.Add()([k.layers.Softmax()(x), k.layers.Softmax(axis=1)(x)])


@block((6, 6, 4))
def dropout_batch_norm(k, x):
    """Dropout, BatchNormalization (inference: moving statistics), SpatialDropout2D."""
    x = k.layers.Dropout(0.5)(x)
    x = k.layers.BatchNormalization()(k.layers.Conv2D(5, 3)(x))
    return k.layers.SpatialDropout2D(0.3)(x)


@block((7,), tokens=30)
def embedding(k, x):
    """Embedding of token ids."""
    return k.layers.Embedding(30, 6)(x)


@block((12,), tokens=50)
def text_classifier(k, x):
    """Embedding -> Conv1D -> GlobalMaxPooling1D -> Dense."""
    x = k.layers.Embedding(50, 8)(x)
    x = k.layers.Conv1D(6, 3, activation="relu")(x)
    return k.layers.Dense(3)(k.layers.GlobalMaxPooling1D()(x))


@block((16, 16, 3))
def unet(k, x):
    """A two-level U-Net: Conv/MaxPool down, UpSampling2D and Conv2DTranspose up, skip
    connections concatenated."""
    conv = functools.partial(k.layers.Conv2D, padding="same", activation="relu")
    d1 = conv(4, 3)(x)
    d2 = conv(8, 3)(k.layers.MaxPooling2D()(d1))
    bottom = conv(8, 3)(k.layers.MaxPooling2D()(d2))
    u2 = k.layers.Concatenate()([k.layers.UpSampling2D()(bottom), d2])
    u2 = conv(8, 3)(u2)
    u1 = k.layers.Conv2DTranspose(4, 2, strides=2)(u2)
    u1 = conv(4, 3)(k.layers.Concatenate()([u1, d1]))
    return k.layers.Conv2D(2, 1)(u1)


@block((6, 6, 3))
def leaky_elu_prelu(k, x):
    """LeakyReLU, ELU and PReLU (one slope per element, and shared across rows/columns)."""
    a = k.layers.LeakyReLU(0.2)(x)
    b = k.layers.ELU(0.7)(x)
    c = k.layers.PReLU()(x)
    d = k.layers.PReLU(shared_axes=[1, 2])(x)
    return k.layers.Concatenate()([a, b, c, d])


# ----------------------------------------------------------------------------- more Keras layers


@block((6, 8))
def attention(k, x):
    """Attention (dot-product) and AdditiveAttention of a sequence with itself."""
    return k.layers.Concatenate()([k.layers.Attention()([x, x]),
                                   k.layers.AdditiveAttention()([x, x])])


@block((6, 4))
def lstm_unrolled(k, x):
    """LSTM with unroll=True (no loop: the steps are written out)."""
    return k.layers.LSTM(5, unroll=True, return_sequences=True)(x)


@block((8, 8, 3))
def normalization_rescaling(k, x):
    """Normalization (its mean and variance are weights) and Rescaling."""
    return k.layers.Rescaling(0.5, offset=0.25)(k.layers.Normalization()(x))


@block((8, 8, 3))
def resizing(k, x):
    """Resizing, bilinear, to 12 x 10."""
    return k.layers.Resizing(12, 10)(x)


@block((9, 7, 3))
def resizing_area(k, x):
    """Resizing by area averaging, down on one side and up on the other (ResizeArea)."""
    return k.layers.Resizing(4, 10, interpolation="area")(x)


@block((8, 8, 3))
def random_flip(k, x):
    """RandomFlip (at inference, the identity)."""
    return k.layers.RandomFlip()(x)


@block((6, 6, 8))
def group_normalization(k, x):
    """GroupNormalization, 4 groups."""
    return k.layers.GroupNormalization(groups=4)(x)


@block((6, 6, 6, 2))
def volumetric(k, x):
    """Conv3D, Conv3DTranspose and AveragePooling3D."""
    x = k.layers.Conv3D(3, 3, padding="same")(x)
    x = k.layers.Conv3DTranspose(2, 3, strides=2, padding="same")(x)
    return k.layers.AveragePooling3D(2)(x)


@block((4, 4, 4, 2))
def volumetric_reshaping(k, x):
    """UpSampling3D, ZeroPadding3D, Cropping3D, MaxPooling3D, GlobalAveragePooling3D,
    GlobalMaxPooling3D."""
    x = k.layers.Cropping3D(1)(k.layers.ZeroPadding3D(2)(k.layers.UpSampling3D(2)(x)))
    x = k.layers.MaxPooling3D(2)(x)
    return k.layers.Concatenate()([k.layers.GlobalAveragePooling3D()(x),
                                   k.layers.GlobalMaxPooling3D()(x)])


@block((6, 8))
def merging(k, x):
    """Subtract, Average, Maximum, Minimum and Dot (normalized: cosine) layers."""
    a, b = k.layers.Dense(8)(x), k.layers.Dense(8)(x)
    merged = [k.layers.Subtract()([a, b]), k.layers.Average()([a, b]),
              k.layers.Maximum()([a, b]), k.layers.Minimum()([a, b])]
    dot = k.layers.Dot(axes=2, normalize=True)([a, b])
    return k.layers.Concatenate()([*merged, dot])


@block((6, 4))
def reshaping(k, x):
    """Permute, Reshape, Flatten, RepeatVector, UpSampling1D, ZeroPadding1D, Cropping1D,
    TimeDistributed(Dense)."""
    x = k.layers.Permute((2, 1))(x)
    x = k.layers.Reshape((6, 4))(x)
    x = k.layers.UpSampling1D(2)(k.layers.ZeroPadding1D((1, 2))(x))
    x = k.layers.TimeDistributed(k.layers.Dense(3))(k.layers.Cropping1D((2, 1))(x))
    return k.layers.RepeatVector(2)(k.layers.Flatten()(x))


@block((6, 8))
def activations(k, x):
    """The activations by name (swish, hard_sigmoid, softplus, softsign, selu, mish,
    exponential, relu6, sigmoid, tanh) and ReLU's max_value / negative_slope / threshold."""
    names = ["swish", "hard_sigmoid", "softplus", "softsign", "selu", "mish", "exponential",
             "relu6", "sigmoid", "tanh"]
    outputs = [k.layers.Activation(name)(x) for name in names]
    outputs.append(k.layers.ReLU(max_value=2.0, negative_slope=0.1, threshold=0.5)(x))
    return k.layers.Concatenate()(outputs)


@block((6, 8))
def masking_unit_norm(k, x):
    """Masking (timesteps equal to 0 masked), UnitNormalization."""
    return k.layers.UnitNormalization()(k.layers.Masking(0.0)(x))


@block((12, 4))
def conv1d_transpose_depthwise(k, x):
    """Conv1DTranspose (stride 2) and DepthwiseConv1D."""
    x = k.layers.Conv1DTranspose(6, 3, strides=2, padding="same")(x)
    return k.layers.DepthwiseConv1D(3, depth_multiplier=2)(x)


@block((6, 8))
def noise_and_regularization(k, x):
    """GaussianNoise, GaussianDropout, AlphaDropout, ActivityRegularization (inference:
    identities)."""
    x = k.layers.GaussianDropout(0.2)(k.layers.GaussianNoise(0.5)(x))
    return k.layers.ActivityRegularization(0.1)(k.layers.AlphaDropout(0.1)(x))


# ----------------------------------------------------------------------------- the rest of Keras


# ----------------------------------------------------------------------------- recurrent layers
# (TF's frozen while loops, lifted into WhileLoop at import)


@block((6, 4))
def lstm(k, x):
    """LSTM, its last output (a while loop writing a one-element list)."""
    return k.layers.LSTM(5)(x)


@block((6, 4))
def gru(k, x):
    """GRU, every step's output (return_sequences: a list the loop writes)."""
    return k.layers.GRU(5, return_sequences=True)(x)


@block((6, 4))
def simple_rnn(k, x):
    """SimpleRNN."""
    return k.layers.SimpleRNN(5)(x)


@block((6, 4))
def bidirectional(k, x):
    """Bidirectional LSTM: two loops, one over the reversed sequence."""
    return k.layers.Bidirectional(k.layers.LSTM(3))(x)


@block((3, 6, 6, 2))
def conv_lstm2d(k, x):
    """ConvLSTM2D (a while loop over convolutions)."""
    return k.layers.ConvLSTM2D(3, 3, padding="same")(x)


@block((7, 3))
def stacked_recurrent(k, x):
    """An LSTM's sequence into a GRU without reset_after running backwards, its final
    state returned too (return_state: the loop's other outputs)."""
    x = k.layers.LSTM(6, return_sequences=True)(x)
    output, state = k.layers.GRU(4, reset_after=False, go_backwards=True,
                                 return_state=True)(x)
    return k.layers.Concatenate()([output, state])


@block((50,), tokens=1000, ci=False)
def lstm_text_classifier(k, x):
    """A text classifier at a realistic size: Embedding(1000, 64), LSTM(128), Dense(1)
    over 50 tokens (the recurrent layers' benchmark)."""
    x = k.layers.Embedding(1000, 64)(x)
    return k.layers.Dense(1)(k.layers.LSTM(128)(x))


@block((40, 32), ci=False)
def gru_sequence(k, x):
    """Two stacked GRUs at a realistic size: GRU(128, return_sequences), GRU(64) over 40
    steps of 32 features."""
    return k.layers.GRU(64)(k.layers.GRU(128, return_sequences=True)(x))


@block((8, 8, 3))
def center_crop(k, x):
    """CenterCrop to 5 x 7 (a tf.cond on the input's size: Switch, Merge, Asserts in the
    branch that crops)."""
    return k.layers.CenterCrop(5, 7)(x)


@block((8,), tokens=6)
def masked_lstm(k, x):
    """An LSTM over a zero-masked Embedding (the mask: a second list the loop reads, and
    selects between new and previous states)."""
    x = k.layers.Embedding(6, 4, mask_zero=True)(x)
    return k.layers.LSTM(5, return_sequences=True)(x)


@block((6,), kind="vocabulary", tokens=10)
def category_encoding(k, x):
    """CategoryEncoding (multi-hot, and counts) of token ids."""
    return k.layers.Concatenate()([
        k.layers.CategoryEncoding(10, output_mode="multi_hot")(x),
        k.layers.CategoryEncoding(10, output_mode="count")(x)])
