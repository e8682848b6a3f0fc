"""The image resize ops (``minigraph.ops.image_ops``): ResizeNearestNeighbor, ResizeBilinear,
ResizeBicubic, ResizeArea and the gradients ResizeNearestNeighborGrad, ResizeBilinearGrad.

* Against ``tf.raw_ops`` (``oracle``), on every backend, for the three coordinate modes
  (legacy, align_corners, half_pixel_centers), up- and down-sampling and non-integer ratios:
  bit for bit, one-pixel sides under align_corners included (TF scales them by in / out).
* Independent float64 references written here from the coordinate rules (docs/ops/image.md).
* Every gradient against float64 central differences, the second-order ones included.
* Errors with TF's words, at construction and at run time; the native kernel is the one
  that runs for float32; frozen tf_keras UpSampling2D / Resizing graphs import and match.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BACKENDS

import minigraph as mg
from minigraph import ops
from minigraph.framework.gradient_registry import registered_gradients
from minigraph.testing import tf_graphs
from minigraph.testing.gradient_checker import compute_gradient, max_error

F32, F64 = np.float32, np.float64
MODES = [(False, False), (True, False), (False, True)]
MODE_IDS = ["legacy", "align_corners", "half_pixel"]
SIZES = [((4, 5), (9, 11)), ((9, 11), (4, 5)), ((5, 7), (5, 7)), ((3, 8), (7, 3)),
         ((1, 1), (3, 2)), ((6, 6), (1, 1)), ((13, 17), (29, 6)), ((2, 3), (17, 5))]
InvalidArgumentError = mg.errors.InvalidArgumentError


def run(fetches, backend="reference", feeds=None):
    graph = (fetches[0] if isinstance(fetches, list) else fetches).graph
    return mg.ClientSession(graph, backend=backend).Run(feeds or {}, fetches)


# ----------------------------------------------------------------------------- references


def source_f64(out_size, in_size, align_corners, half_pixel, nearest):
    """Where each output index reads, in float64 (the scale rounded to float32 as TF)."""
    if align_corners and out_size > 1:
        scale = float(F32(in_size - 1) / F32(out_size - 1))
    else:
        scale = float(F32(in_size) / F32(out_size))
    i = np.arange(out_size, dtype=F64)
    if half_pixel:
        return (i + 0.5) * scale - (0.0 if nearest else 0.5)
    return i * scale


def nearest_ref(x, out_hw, align_corners, half_pixel):
    index = []
    for axis, out in enumerate(out_hw):
        s = source_f64(out, x.shape[1 + axis], align_corners, half_pixel, nearest=True)
        s = np.floor(s + 0.5) if align_corners else np.floor(s)
        index.append(np.clip(s.astype(int), 0, x.shape[1 + axis] - 1))
    return x[:, index[0]][:, :, index[1]]


def bilinear_ref(x, out_hw, align_corners, half_pixel):
    """sum over the four neighbours of weight * pixel, float64."""
    x = x.astype(F64)
    parts = []
    for axis, out in enumerate(out_hw):
        s = source_f64(out, x.shape[1 + axis], align_corners, half_pixel, nearest=False)
        lo = np.clip(np.floor(s).astype(int), 0, x.shape[1 + axis] - 1)
        hi = np.minimum(np.ceil(s).astype(int), x.shape[1 + axis] - 1)
        parts.append((lo, hi, s - np.floor(s)))
    (ylo, yhi, yl), (xlo, xhi, xl) = parts
    yl, xl = yl[:, None, None], xl[None, :, None]
    return ((x[:, ylo][:, :, xlo] * (1 - xl) + x[:, ylo][:, :, xhi] * xl) * (1 - yl)
            + (x[:, yhi][:, :, xlo] * (1 - xl) + x[:, yhi][:, :, xhi] * xl) * yl)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_forward_matches_float64_reference(backend, mode, sizes):
    (h, w), (oh, ow) = sizes
    x = np.random.default_rng(h * 100 + oh).standard_normal((2, h, w, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    kw = dict(align_corners=mode[0], half_pixel_centers=mode[1])
    nearest, bilinear = run([ops.ResizeNearestNeighbor(root, x, [oh, ow], **kw),
                             ops.ResizeBilinear(root, x, [oh, ow], **kw)], backend)
    np.testing.assert_array_equal(nearest, nearest_ref(x, (oh, ow), *mode))
    # TF's source coordinates are float32 (one rounding of i * scale): the weights differ
    # from float64 ones by ~1e-6, times pixel differences of a few units
    np.testing.assert_allclose(bilinear, bilinear_ref(x, (oh, ow), *mode), rtol=1e-6,
                               atol=2e-5)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_gradients_are_the_adjoints(mode):
    """<resize(x), g> = <x, resize_grad(g)> in float64 (the float64 session)."""
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((2, 5, 7, 2)), rng.standard_normal((2, 8, 3, 2))
    kw = dict(align_corners=mode[0], half_pixel_centers=mode[1])
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.float32, shape=x.shape)
    gp = ops.Placeholder(root, mg.float32, shape=g.shape)
    fetches = [ops.ResizeNearestNeighbor(root, xp, [8, 3], **kw),
               ops.ResizeNearestNeighborGrad(root, gp, [5, 7], **kw),
               ops.ResizeBilinear(root, xp, [8, 3], **kw), ops.ResizeBilinearGrad(root, gp, xp,
                                                                                   **kw)]
    nn, nn_grad, bl, bl_grad = run(fetches, "float64", {xp: x, gp: g})
    assert nn.dtype == bl_grad.dtype == F64
    np.testing.assert_allclose((nn * g).sum(), (x * nn_grad).sum(), rtol=1e-12)
    np.testing.assert_allclose((bl * g).sum(), (x * bl_grad).sum(), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtypes(backend):
    """Nearest keeps T (exact copies); bilinear gives float32 whatever T (TF); halves' and
    ints' gradients sum in float32 and round once."""
    rng = np.random.default_rng(4)
    x = rng.integers(-50, 50, (1, 3, 4, 2))
    root = mg.Scope.NewRootScope()
    outs = run([ops.ResizeNearestNeighbor(root, x.astype(np.int32), [5, 7]),
                ops.ResizeNearestNeighbor(root, x.astype(np.int64), [5, 7]),
                ops.ResizeBilinear(root, x.astype(np.int32), [5, 7], half_pixel_centers=True),
                ops.ResizeBilinear(root, x.astype(np.float16), [5, 7], half_pixel_centers=True),
                ops.ResizeBilinear(root, x.astype(F64), [5, 7], half_pixel_centers=True),
                ops.ResizeNearestNeighborGrad(root, x.astype(np.int32), [2, 2])], backend)
    assert [o.dtype for o in outs] == [np.int32, np.int64, F32, F32, F32, np.int32]
    np.testing.assert_array_equal(outs[0], nearest_ref(x, (5, 7), False, False))
    expected = bilinear_ref(x, (5, 7), False, True)
    for out in outs[2:5]:
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-5)
    assert outs[5].sum() == x.sum()


@pytest.mark.skipif("native" not in BACKENDS, reason="the native backend is not built")
def test_native_kernels_run_for_float32():
    root = mg.Scope.NewRootScope()
    x = np.ones((1, 3, 4, 2), F32)
    ops.ResizeBilinear(root.WithOpName("bl"), x, [5, 6])
    ops.ResizeNearestNeighbor(root.WithOpName("nn"), x, [5, 6])
    ops.ResizeNearestNeighbor(root.WithOpName("nn64"), x.astype(F64), [5, 6])
    metadata = mg.RunMetadata()
    mg.ClientSession(root, backend="native").Run({}, ["bl:0", "nn:0", "nn64:0"],
                                                 run_metadata=metadata)
    assert metadata.kernel_of("bl") == "native:image_kernels.resize_bilinear_native"
    assert metadata.kernel_of("nn") == "native:image_kernels.resize_nearest_neighbor_native"
    assert metadata.kernel_of("nn64") == "reference:image_kernels.resize_nearest_neighbor"


@pytest.mark.skipif("native" not in BACKENDS, reason="the native backend is not built")
def test_native_bilinear_is_the_numpy_kernel_bit_for_bit_on_every_isa():
    """Wide channel counts (the vectorized loop) and 3 channels, every ISA the CPU has."""
    from minigraph.backends import native
    best = native.isa()
    rng = np.random.default_rng(15)
    try:
        for isa in ("scalar", "avx2", "avx512"):
            if native.set_isa(isa) != isa:
                continue
            for c in (3, 37):
                x = rng.standard_normal((2, 5, 6, c)).astype(F32)
                root = mg.Scope.NewRootScope()
                y = ops.ResizeBilinear(root, x, [9, 4], half_pixel_centers=True)
                np.testing.assert_array_equal(run(y, "native").view(np.uint32),
                                              run(y).view(np.uint32), err_msg=isa)
    finally:
        native.set_isa(best)


@pytest.mark.skipif("native" not in BACKENDS, reason="the native backend is not built")
def test_c_wrappers_check_tables():
    from minigraph.backends import image_kernels as ik
    x = np.ones((1, 3, 4, 2), F32)
    rows, cols = ik.linear_table(5, 3, False, True), ik.linear_table(6, 4, False, True)
    with pytest.raises(ValueError, match="outside"):
        ik.c_resize_nearest(x, np.array([0, 3]), np.array([0, 1]))
    with pytest.raises(ValueError, match="tables"):
        ik.c_resize_bilinear(x, rows, cols._replace(lerp=cols.lerp[:2]))
    with pytest.raises(ValueError, match="4-D"):
        ik.c_resize_nearest(x[0], np.array([0]), np.array([0]))
    np.testing.assert_array_equal(ik.c_resize_bilinear(x, rows, cols), np.ones((1, 5, 6, 2)))


# ----------------------------------------------------------------------------- errors


def test_construction_and_run_time_errors():
    root = mg.Scope.NewRootScope()
    x = np.ones((1, 3, 4, 2), F32)
    cases = [
        (lambda: ops.ResizeBilinear(root, x, [5, 5], align_corners=True,
                                    half_pixel_centers=True),
         "If half_pixel_centers is True, align_corners must be False"),
        (lambda: ops.ResizeNearestNeighbor(root, x[0], [5, 5]), "input must be 4-dimensional"),
        (lambda: ops.ResizeBilinear(root, x, [5, 5, 5]), "shape_t must have two elements"),
        (lambda: ops.ResizeBilinear(root, x, [[5, 5]]), "shape_t must be 1-dimensional"),
        (lambda: ops.ResizeBilinear(root, x, [0, 5]), "output dimensions must be positive"),
        (lambda: ops.ResizeBilinear(root, np.ones((1, 3, 4, 0), F32), [5, 5]),
         "image must have at least one channel"),
        (lambda: ops.ResizeNearestNeighbor(root, np.ones((1, 0, 4, 1), F32), [5, 5]),
         "input image must be of non-zero size"),
        (lambda: ops.ResizeNearestNeighborGrad(root, x, [-1, 2]),
         "shape_t's elements must be positive"),
        (lambda: ops.ResizeBilinearGrad(root, np.ones((1, 0, 4, 2), F32), x),
         "resized dimensions must be positive"),
        (lambda: ops.ResizeBilinearGrad(root, x, np.ones((1, 3, 0, 2), F32)),
         "original dimensions must be positive"),
        (lambda: ops.ResizeBilinearGrad(root, x, np.ones((2, 3, 4, 2), F32)),
         "same batch"),
        (lambda: ops.ResizeBilinearGrad(root, x.astype(F64), x), "grads"),
    ]
    for build, words in cases:
        with pytest.raises(InvalidArgumentError, match=words):
            build()
    sp = ops.Placeholder(root, mg.int32, shape=[None])
    y = ops.ResizeBilinear(root.WithOpName("r"), x, sp)
    assert y.shape == (1, None, None, 2)
    with pytest.raises(InvalidArgumentError, match="ResizeBilinear 'r'.*output dimensions"):
        run(y, feeds={sp: np.array([3, 0], np.int32)})
    with pytest.raises(InvalidArgumentError, match="shape_t must have two elements"):
        run(y, feeds={sp: np.array([3], np.int32)})


# ----------------------------------------------------------------------------- gradients


def assert_gradients_match(xs, values, y, feeds=None):
    theoretical, numerical = compute_gradient(xs, values, y, feeds=feeds)
    assert max_error(theoretical, numerical) < 1e-6
    assert max(float(np.abs(n).max()) for n in numerical) > 1e-3


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("sizes", [((3, 4), (5, 7)), ((5, 7), (2, 3))], ids=str)
def test_resize_gradients_first_and_second_order(mode, sizes):
    (h, w), (oh, ow) = sizes
    rng = np.random.default_rng(11)
    kw = dict(align_corners=mode[0], half_pixel_centers=mode[1])
    root = mg.Scope.NewRootScope()
    xp = ops.Placeholder(root, mg.float32, shape=(2, h, w, 2))
    gp = ops.Placeholder(root, mg.float32, shape=(2, oh, ow, 2))
    x, g = rng.standard_normal((2, h, w, 2)), rng.standard_normal((2, oh, ow, 2))
    assert_gradients_match([xp], [x], ops.ResizeNearestNeighbor(root, xp, [oh, ow], **kw))
    assert_gradients_match([xp], [x], ops.ResizeBilinear(root, xp, [oh, ow], **kw))
    assert_gradients_match([gp], [g], ops.ResizeNearestNeighborGrad(root, gp, [h, w], **kw))
    assert_gradients_match([gp], [g], ops.ResizeBilinearGrad(root, gp, xp, **kw),
                           feeds={xp: x})


IMAGE_GRADIENT_TESTS = dict.fromkeys(
    ["ResizeNearestNeighbor", "ResizeBilinear", "ResizeNearestNeighborGrad",
     "ResizeBilinearGrad"], "test_resize_gradients_first_and_second_order")


def test_every_image_gradient_is_checked():
    from minigraph.ops import image_ops
    ours = {getattr(image_ops, name).op_def.name for name in image_ops.__all__}
    registered = {op for op, fn in registered_gradients().items() if fn is not None
                  and op in ours}
    assert registered == set(IMAGE_GRADIENT_TESTS)
    assert all(name in globals() for name in IMAGE_GRADIENT_TESTS.values())


# ----------------------------------------------------------------------------- TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_against_tensorflow_bit_for_bit(tf, backend, mode):
    rng = np.random.default_rng(12)
    kw = dict(align_corners=mode[0], half_pixel_centers=mode[1])
    for sizes in SIZES + [((1, 4), (3, 4)), ((1, 1), (5, 4))]:
        (h, w), (oh, ow) = sizes
        x = rng.standard_normal((2, h, w, 3)).astype(F32)
        x[0, 0, 0, 0] = np.inf if (h, w) == (oh, ow) else x[0, 0, 0, 0]  # a copy keeps inf
        g = rng.standard_normal((2, oh, ow, 3)).astype(F32)
        theirs = [tf.raw_ops.ResizeNearestNeighbor(images=x, size=[oh, ow], **kw),
                  tf.raw_ops.ResizeBilinear(images=x, size=[oh, ow], **kw),
                  tf.raw_ops.ResizeNearestNeighborGrad(grads=g, size=[h, w], **kw),
                  tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x, **kw)]
        root = mg.Scope.NewRootScope()
        mine = run([ops.ResizeNearestNeighbor(root, x, [oh, ow], **kw),
                    ops.ResizeBilinear(root, x, [oh, ow], **kw),
                    ops.ResizeNearestNeighborGrad(root, g, [h, w], **kw),
                    ops.ResizeBilinearGrad(root, g, x, **kw)], backend)
        for index, (a, b) in enumerate(zip(mine, theirs)):
            b = b.numpy()
            assert a.dtype == b.dtype and a.shape == b.shape, (sizes, index)
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32),
                                          err_msg=str((sizes, index)))


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_other_dtypes_against_tensorflow(tf, backend):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 4, 5, 2))
    g = rng.standard_normal((1, 7, 3, 2)).astype(F32)
    kw = dict(half_pixel_centers=True)
    for dtype in (np.float16, F64, np.int32):
        xd = (x * 10).astype(dtype)
        root = mg.Scope.NewRootScope()
        mine = run([ops.ResizeNearestNeighbor(root, xd, [7, 3], **kw),
                    ops.ResizeBilinear(root, xd, [7, 3], **kw)], backend)
        theirs = [tf.raw_ops.ResizeNearestNeighbor(images=xd, size=[7, 3], **kw).numpy(),
                  tf.raw_ops.ResizeBilinear(images=xd, size=[7, 3], **kw).numpy()]
        for a, b in zip(mine, theirs):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    for dtype in (np.float16, F64):
        root = mg.Scope.NewRootScope()
        mine = run(ops.ResizeBilinearGrad(root, g, x.astype(dtype), **kw), backend)
        theirs = tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x.astype(dtype),
                                               **kw).numpy()
        assert mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine.astype(F64), theirs.astype(F64), rtol=1e-3)


@pytest.mark.oracle
@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_keras_resizes_import_and_match(tf, backend):
    keras = pytest.importorskip("tf_keras")
    layers = keras.layers
    x = np.random.default_rng(14).standard_normal((2, 4, 5, 3)).astype(F32)
    models = [layers.UpSampling2D((2, 3), interpolation="nearest"),
              layers.UpSampling2D(2, interpolation="bilinear"),
              layers.Resizing(9, 11), layers.Resizing(3, 2, interpolation="nearest")]
    for layer in models:
        model = keras.Sequential([layer])
        types, ours, theirs = tf_graphs.run_frozen(model, x, backend)
        assert any(t.startswith("Resize") for t in types)
        np.testing.assert_array_equal(ours, theirs)


def _crop_reference(image, boxes, box_ind, crop, method, fill):
    """Each crop sample from the definition, in float64: the box's rows and columns spread
    evenly over [y1, y2] * (H - 1) (one sample: the centre), bilinear or nearest (halves away
    from zero), ``fill`` outside the image."""
    n, (crop_h, crop_w) = len(boxes), crop
    _, height, width, depth = image.shape
    out = np.empty((n, crop_h, crop_w, depth))
    for i, ((y1, x1, y2, x2), b) in enumerate(zip(boxes.astype(F64), box_ind)):
        for r in range(crop_h):
            y = y1 * (height - 1) + r * (y2 - y1) * (height - 1) / (crop_h - 1) \
                if crop_h > 1 else 0.5 * (y1 + y2) * (height - 1)
            for c in range(crop_w):
                x = x1 * (width - 1) + c * (x2 - x1) * (width - 1) / (crop_w - 1) \
                    if crop_w > 1 else 0.5 * (x1 + x2) * (width - 1)
                if not (0 <= y <= height - 1 and 0 <= x <= width - 1):
                    out[i, r, c] = fill
                elif method == "nearest":
                    # a position within rounding of a half could go either way: NaN = skip
                    ambiguous = min(abs(y % 1 - 0.5), abs(x % 1 - 0.5)) < 1e-4
                    out[i, r, c] = np.nan if ambiguous else \
                        image[b, int(np.floor(y + 0.5)), int(np.floor(x + 0.5))]
                else:
                    t, le = int(np.floor(y)), int(np.floor(x))
                    bo, ri = min(t + 1, height - 1), min(le + 1, width - 1)
                    dy, dx = y - t, x - le
                    upper = image[b, t, le] * (1 - dx) + image[b, t, ri] * dx
                    lower = image[b, bo, le] * (1 - dx) + image[b, bo, ri] * dx
                    out[i, r, c] = upper * (1 - dy) + lower * dy
    return out


CROP_BOXES = np.array([[0.1, 0.2, 0.8, 0.9], [0.5, 0.5, 0.5, 0.5], [-0.2, 0.3, 1.3, 0.6],
                       [0.9, 0.9, 0.1, 0.1], [0.0, 0.0, 1.0, 1.0]], F32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(3, 4), (1, 2), (7, 1)])
def test_crop_and_resize_samples_each_box(backend, method, crop):
    image = np.random.default_rng(4).standard_normal((2, 5, 6, 3)).astype(F32)
    box_ind = np.array([0, 1, 1, 0, 1], np.int32)
    root = mg.Scope.NewRootScope()
    out = ops.CropAndResize(root, image, CROP_BOXES, box_ind, np.array(crop, np.int32),
                            method=method, extrapolation_value=-2.5)
    assert out.shape == mg.TensorShape([5, *crop, 3])
    value = mg.ClientSession(root, backend=backend).Run({}, out)
    expected = _crop_reference(image, CROP_BOXES, box_ind, crop, method, -2.5)
    decided = ~np.isnan(expected)  # (nearest: the samples not at a half)
    assert decided.mean() > 0.3
    np.testing.assert_allclose(value[decided], expected[decided], rtol=1e-5, atol=1e-5)
    with pytest.raises(mg.errors.InvalidArgumentError, match=r"outside \[0, batch_size\)"):
        ops.CropAndResize(root, image, CROP_BOXES, np.array([0, 2, 1, 0, 0], np.int32),
                          np.array(crop, np.int32))


@pytest.mark.oracle
@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_crop_and_resize_against_tensorflow(method):
    """Bit for bit: the sample positions and lerps are TF's float32 steps."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(5)
    image = rng.standard_normal((3, 9, 7, 2)).astype(F32)
    boxes = np.concatenate([CROP_BOXES, rng.uniform(-0.3, 1.3, (20, 4)).astype(F32)])
    box_ind = rng.integers(0, 3, len(boxes)).astype(np.int32)
    root = mg.Scope.NewRootScope()
    ours = mg.ClientSession(root).Run({}, ops.CropAndResize(
        root, image, boxes, box_ind, np.array([5, 6], np.int32), method=method,
        extrapolation_value=0.5))
    theirs = tf.raw_ops.CropAndResize(image=image, boxes=boxes, box_ind=box_ind,
                                      crop_size=[5, 6], method=method,
                                      extrapolation_value=0.5).numpy()
    np.testing.assert_array_equal(ours, theirs)


def _keys(a, t):
    """The cubic convolution kernel of Keys (1981) with parameter a, at distance t."""
    t = abs(t)
    if t <= 1:
        return ((a + 2) * t - (a + 3)) * t * t + 1
    if t < 2:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return 0.0


def _bicubic_reference(x, size, align_corners, half_pixel):
    """Separable cubic convolution from the definition, in float64, with the continuous
    kernel (TF reads it from a table at 1/1024 steps): taps at floor(p) - 1 .. + 2, edge
    pixels repeated (a = -0.75), or off-image taps dropped and the rest renormalized
    (half_pixel_centers, a = -0.5)."""
    a = -0.5 if half_pixel else -0.75

    def axis_weights(out_size, in_size):
        scale = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 \
            else in_size / out_size
        matrix = np.zeros((out_size, in_size))
        for o in range(out_size):
            p = (o + 0.5) * scale - 0.5 if half_pixel else o * scale
            base = int(np.floor(p))
            taps = [(base + t, _keys(a, p - (base + t))) for t in range(-1, 3)]
            if half_pixel:
                taps = [(i, w) for i, w in taps if 0 <= i < in_size]
                total = sum(w for _, w in taps)
                taps = [(i, w / total) for i, w in taps]
            for i, w in taps:
                matrix[o, min(max(i, 0), in_size - 1)] += w
        return matrix

    rows = axis_weights(size[0], x.shape[1])
    cols = axis_weights(size[1], x.shape[2])
    return np.einsum("ph,nhwc,qw->npqc", rows, x.astype(F64), cols)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_resize_bicubic_is_cubic_convolution(backend, mode, sizes):
    (in_hw, out_hw) = sizes
    x = np.random.default_rng(6).standard_normal((2, *in_hw, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    out = ops.ResizeBicubic(root, x, np.array(out_hw, np.int32), align_corners=mode[0],
                            half_pixel_centers=mode[1])
    value = mg.ClientSession(root, backend=backend).Run({}, out)
    assert value.dtype == F32 and out.shape == mg.TensorShape([2, *out_hw, 3])
    expected = _bicubic_reference(x, out_hw, *mode)
    # TF's weights are tabulated at 1/1024 steps: a weight may be 3e-3 off the kernel's
    np.testing.assert_allclose(value, expected, rtol=0, atol=4e-3 * np.abs(x).max())


@pytest.mark.oracle
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_resize_bicubic_against_tensorflow(mode):
    """TF's own float32 steps: bit for bit (a 1 x 1 image too: with align_corners its
    scale is 1 / out, TF's rule for one-pixel sides)."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(7)
    for in_hw, out_hw in SIZES:
        x = rng.standard_normal((2, *in_hw, 3)).astype(F32)
        root = mg.Scope.NewRootScope()
        ours = mg.ClientSession(root).Run({}, ops.ResizeBicubic(
            root, x, np.array(out_hw, np.int32), align_corners=mode[0],
            half_pixel_centers=mode[1]))
        theirs = tf.raw_ops.ResizeBicubic(images=x, size=out_hw, align_corners=mode[0],
                                          half_pixel_centers=mode[1]).numpy()
        ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32))
        assert ulps.max() == 0, (in_hw, out_hw)


def _hsv_reference(rgb):
    """The hexcone model from its definition (float64): hue in [0, 1) from the largest
    channel, saturation range / value, value the largest channel."""
    out = np.zeros(rgb.shape)
    for index in np.ndindex(*rgb.shape[:-1]):
        r, g, b = rgb[index].astype(F64)
        high, low = max(r, g, b), min(r, g, b)
        spread = high - low
        if spread == 0:
            hue = 0.0
        elif high == r:
            hue = ((g - b) / spread / 6) % 1.0
        elif high == g:
            hue = (b - r) / spread / 6 + 1 / 3
        else:
            hue = (r - g) / spread / 6 + 2 / 3
        out[index] = [hue, spread / high if high > 0 else 0.0, high]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_colour_conversions_and_contrast(backend):
    rgb = np.random.default_rng(8).random((2, 4, 5, 3)).astype(F32)
    rgb[0, 0, :4] = [[0.5, 0.5, 0.5], [0, 0, 0], [1, 0, 1], [0.2, 0.9, 0.9]]
    root = mg.Scope.NewRootScope()
    hsv = ops.RGBToHSV(root, rgb)
    fetches = [hsv, ops.HSVToRGB(root, hsv), ops.AdjustContrastv2(root, rgb, F32(1.7))]
    hsv_v, back, contrast = mg.ClientSession(root, backend=backend).Run({}, fetches)
    np.testing.assert_allclose(hsv_v, _hsv_reference(rgb), atol=1e-6)
    np.testing.assert_allclose(back, rgb, atol=1e-6)
    mean = rgb.astype(F64).mean(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(contrast, (rgb - mean) * 1.7 + mean, atol=1e-6)
    with pytest.raises(InvalidArgumentError, match="input must have 3 channels but input only "
                                                   "has 4 channels"):
        ops.RGBToHSV(root, np.zeros((2, 4), F32))
    with pytest.raises(InvalidArgumentError, match="input must be at least 3-D"):
        ops.AdjustContrastv2(root, np.zeros((4, 3), F32), F32(1))


@pytest.mark.oracle
def test_colour_ops_against_tensorflow():
    """RGBToHSV and HSVToRGB bit for bit (TF's expression order); AdjustContrastv2 within an
    ulp (TF's mean is a float32 tree sum, minigraph's a float64 sum rounded once)."""
    tf = pytest.importorskip("tensorflow")
    rgb = np.random.default_rng(9).random((3, 6, 7, 3)).astype(F32)
    rgb[0, 0, :3] = [[0.5, 0.5, 0.5], [0, 0, 0], [1, 0, 1]]
    root = mg.Scope.NewRootScope()
    hsv_t = tf.raw_ops.RGBToHSV(images=rgb).numpy()
    ours = mg.ClientSession(root).Run({}, [ops.RGBToHSV(root, rgb), ops.HSVToRGB(root, hsv_t),
                                           ops.AdjustContrastv2(root, rgb, F32(0.6))])
    np.testing.assert_array_equal(ours[0], hsv_t)
    np.testing.assert_array_equal(ours[1], tf.raw_ops.HSVToRGB(images=hsv_t).numpy())
    contrast = tf.raw_ops.AdjustContrastv2(images=rgb, contrast_factor=F32(0.6)).numpy()
    ulps = np.abs(ours[2].view(np.int32).astype(np.int64) - contrast.view(np.int32))
    assert ulps.max() <= 2


def _area_reference(x, out_hw, align_corners):
    """Each output pixel: the average of the input area it covers (float64), the area of
    output (p, q) being [p * sh, (p + 1) * sh) x [q * sw, (q + 1) * sw), sh = in / out (with
    ``align_corners`` and more than one pixel each side: (in - 1) / (out - 1)); cells past
    the image read its edge."""
    def coverage(out_size, in_size):
        scale = ((in_size - 1) / (out_size - 1) if align_corners and in_size > 1
                 and out_size > 1 else in_size / out_size)
        weights = np.zeros((out_size, in_size))
        for p in range(out_size):
            lo, hi = p * scale, (p + 1) * scale
            for v in range(int(np.floor(lo)), int(np.ceil(hi))):
                weights[p, min(max(v, 0), in_size - 1)] += min(v + 1, hi) - max(v, lo)
        return weights / scale

    rows, cols = coverage(out_hw[0], x.shape[1]), coverage(out_hw[1], x.shape[2])
    return np.einsum("ph,nhwc,qw->npqc", rows, x.astype(F64), cols)


AREA_SIZES = [((6, 8), (3, 4)), ((5, 7), (3, 3)), ((4, 4), (7, 9)), ((7, 5), (2, 5)),
              ((1, 1), (3, 2)), ((9, 6), (4, 1))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("sizes", AREA_SIZES, ids=str)
def test_resize_area_averages_the_covered_area(backend, align_corners, sizes):
    in_hw, out_hw = sizes
    x = np.random.default_rng(8).standard_normal((2, *in_hw, 3)).astype(F32)
    root = mg.Scope.NewRootScope()
    out = ops.ResizeArea(root, x, np.array(out_hw, np.int32), align_corners=align_corners)
    value = mg.ClientSession(root, backend=backend).Run({}, out)
    assert value.dtype == F32 and out.shape == mg.TensorShape([2, *out_hw, 3])
    np.testing.assert_allclose(value, _area_reference(x, out_hw, align_corners), rtol=0,
                               atol=2e-6 * max(1.0, float(np.abs(x).max())))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16], ids=str)
def test_resize_area_against_tensorflow(dtype):
    """TF's own float32 steps, bit for bit, down and up, both scale rules."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(9)
    for in_hw, out_hw in AREA_SIZES + [((13, 17), (5, 6)), ((3, 4), (11, 10))]:
        x = (rng.standard_normal((2, *in_hw, 3)) * 50).astype(dtype)
        for align_corners in (False, True):
            root = mg.Scope.NewRootScope()
            ours = mg.ClientSession(root).Run({}, ops.ResizeArea(
                root, x, np.array(out_hw, np.int32), align_corners=align_corners))
            theirs = tf.raw_ops.ResizeArea(images=x, size=out_hw,
                                           align_corners=align_corners).numpy()
            np.testing.assert_array_equal(ours, theirs, err_msg=str((in_hw, out_hw)))
