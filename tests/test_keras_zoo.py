"""The Keras zoo (``minigraph/testing/keras_zoo.py``): a model of every
``tf_keras.applications`` family and a block of each common Keras layer, frozen by TensorFlow
2.21, imports and computes on every backend what TensorFlow computed.

Tolerance: each output within ``ULPS`` float32 ulps of 1 times its largest magnitude (at
least 1) of TensorFlow's, ``|minigraph - tf| <= 64 * 2**-23 * max(1, max|tf|)`` (as in
``test_tf_interop.py``): rounding errors of a float32 network scale with its largest sums, and
TF's oneDNN kernels sum in another order. The largest seen is about 7 such ulps (ResNet50).

An op minigraph lacks makes its entries fail at import (nothing is skipped for it). Entries
marked ``ci=False`` run with ``--zoo-full`` (or ``MINIGRAPH_ZOO_FULL=1``). TensorFlow is only
needed on a cold cache (``$MINIGRAPH_TF_CACHE``).
"""

from __future__ import annotations

import functools
import inspect
import os
import zipfile

import numpy as np
import pytest
from conftest import NATIVE_AVAILABLE

import minigraph as mg
from minigraph.testing import keras_zoo, tf_graphs

pytestmark = pytest.mark.oracle

ULPS = 64


def _zoo_names(full: bool) -> list[str]:
    return [entry.name for entry in keras_zoo.entries(full=full)
            if entry.kind != "vocabulary"]


def pytest_generate_tests(metafunc):
    if "zoo_name" in metafunc.fixturenames:
        full = (metafunc.config.getoption("--zoo-full")
                or os.environ.get("MINIGRAPH_ZOO_FULL") == "1")
        metafunc.parametrize("zoo_name", _zoo_names(full))


_LOADED: dict[str, tf_graphs.TFGraph] = {}
_IMPORTED: dict[str, mg.Scope] = {}


def _load(name: str) -> tf_graphs.TFGraph:
    """The frozen entry (built by TensorFlow on a cold cache), once per test run."""
    if name not in _LOADED:
        try:
            _LOADED[name] = keras_zoo.load(name)
        except ImportError as error:  # a cold cache and no TensorFlow
            pytest.skip(f"{name} is not cached and TensorFlow is needed to freeze it: {error}")
    return _LOADED[name]


def test_zoo_entry_matches_tensorflow(zoo_name, backend):
    graph = _load(zoo_name)
    if zoo_name not in _IMPORTED:
        _IMPORTED[zoo_name] = mg.import_graph_def(graph.graph_def)
    outputs = mg.ClientSession(_IMPORTED[zoo_name], backend=backend).Run(graph.feeds,
                                                                         graph.fetches)
    assert len(outputs) == len(graph.expected)
    for index, (actual, expected) in enumerate(zip(outputs, graph.expected)):
        what = f"{zoo_name} on {backend}, output {index}"
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), what
        diff = keras_zoo.max_abs_diff([actual], [expected])
        limit = keras_zoo.tolerance(expected, ULPS)
        assert diff <= limit, f"{what}: max |diff| {diff:.3g} > tolerance {limit:.3g}"


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the fused kernels' native path")
@pytest.mark.parametrize("model", ["resnet50", "mobilenet_v2", "efficientnet_b0",
                                   "nasnet_mobile"])
def test_optimized_zoo_models_give_the_unoptimized_bits(model):
    """Every graph pass on (fused convolutions, folded shapes, no Identity relays) against
    none, on the native backend: the same bits for every output."""
    graph = _load(model)
    if model not in _IMPORTED:
        _IMPORTED[model] = mg.import_graph_def(graph.graph_def)
    root = _IMPORTED[model]
    rewritten = mg.optimize(root, graph.fetches, graph.feeds)
    assert any(op.type.startswith("_Fused") for op in rewritten)
    assert len(rewritten) < len(root.graph())
    optimized = mg.ClientSession(root, backend="native").Run(graph.feeds, graph.fetches)
    plain = mg.ClientSession(root, backend="native", optimizer=mg.OptimizerOptions.all_off()
                             ).Run(graph.feeds, graph.fetches)
    for a, b in zip(optimized, plain):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def test_zoo_has_every_application_family():
    """Every module of ``tf_keras.applications`` that defines models has a zoo entry."""
    pytest.importorskip("tf_keras")
    k = tf_graphs.keras()
    families = {getattr(k.applications, name).__module__ for name in dir(k.applications)
                if name[0].isupper() and callable(getattr(k.applications, name))}
    covered = {getattr(k.applications, constructor).__module__
               for constructor, *_ in keras_zoo.APPLICATIONS.values()}
    assert families and families <= covered, sorted(families - covered)
    assert set(_zoo_names(full=False)) < set(_zoo_names(full=True))


# ----------------------------------------------------------------------------- the cache


def _fake_graph(seed: int) -> tf_graphs.TFGraph:
    rng = np.random.default_rng(seed)
    return tf_graphs.TFGraph("fake", rng.bytes(100), {"x:0": rng.standard_normal((2, 3))},
                             ["Identity:0", "Identity_1:0"],
                             [rng.standard_normal(4).astype(np.float32),
                              rng.integers(0, 9, (2, 2))], 7)


@pytest.fixture
def counted_builds(monkeypatch, tmp_path):
    """The cache in ``tmp_path``; ``ZooEntry.build`` replaced by a counter that makes a new
    fake graph each call."""
    monkeypatch.setenv("MINIGRAPH_TF_CACHE", str(tmp_path))
    builds = []

    def build(entry):
        builds.append(entry.name)
        return _fake_graph(len(builds))

    monkeypatch.setattr(keras_zoo.ZooEntry, "build", build)
    return builds


def _assert_same(a: tf_graphs.TFGraph, b: tf_graphs.TFGraph) -> None:
    assert (a.name, a.graph_def, a.fetches, a.producer) == (b.name, b.graph_def, b.fetches,
                                                            b.producer)
    assert list(a.feeds) == list(b.feeds)
    for x, y in zip([*a.feeds.values(), *a.expected], [*b.feeds.values(), *b.expected]):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def test_cache_stores_what_was_built_and_reads_it_back(counted_builds, tmp_path):
    first = keras_zoo.load("softmax")
    assert counted_builds == ["softmax"]
    path = keras_zoo.cache_path(keras_zoo.ZOO["softmax"])
    assert path.parent == tmp_path and path.exists()
    _assert_same(keras_zoo.load("softmax"), first)
    assert counted_builds == ["softmax"]  # the second load read the file



def test_applications_at_other_sizes_are_cached_apart(counted_builds):
    """An application at another input size is its own entry (name, shape, cache file); at
    its own size it is the zoo's entry; a non-application is refused."""
    resized = keras_zoo.application_at("resnet50", 48)
    assert (resized.name, resized.input_shape) == ("resnet50@48", (48, 48, 3))
    assert keras_zoo.application_at("resnet50", 64) is keras_zoo.ZOO["resnet50"]
    assert keras_zoo.cache_path(resized) != keras_zoo.cache_path(keras_zoo.ZOO["resnet50"])
    keras_zoo.load("resnet50", size=48)
    keras_zoo.load("resnet50", size=48)
    keras_zoo.load("resnet50", size=56)
    assert counted_builds == ["resnet50@48", "resnet50@56"]
    with pytest.raises(ValueError, match="softmax"):
        keras_zoo.application_at("softmax", 32)

def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path):
    path.write_bytes(b"not a zip file at all")


def _other_graph_bytes(path):
    """A whole zip whose graph no longer matches its recorded checksum."""
    with np.load(path) as stored:
        arrays = dict(stored)
    arrays["graph_def"] = arrays["graph_def"][::-1].copy()
    with open(path, "wb") as file:
        np.savez(file, **arrays)


def _missing_member(path):
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            if name != "expected_1.npy":
                archive.writestr(name, data)


@pytest.mark.parametrize("damage", [_truncate, _garbage, _other_graph_bytes, _missing_member])
def test_damaged_cache_entry_is_rebuilt(counted_builds, damage):
    keras_zoo.load("embedding")
    path = keras_zoo.cache_path(keras_zoo.ZOO["embedding"])
    damage(path)
    rebuilt = keras_zoo.load("embedding")
    assert counted_builds == ["embedding", "embedding"]
    _assert_same(rebuilt, _fake_graph(2))
    _assert_same(keras_zoo.load("embedding"), rebuilt)  # and stored whole again
    assert len(counted_builds) == 2


def test_cache_key_follows_the_source_that_builds_the_entry():
    """The digest covers the entry's functions and the helpers they call (``frozen_keras``,
    ``_randomize``), is stable, and differs between entries."""
    entry = keras_zoo.ZOO["resnet50"]
    sources = keras_zoo._sources(functools.partial(keras_zoo.ZooEntry.build, entry.model))
    for helper in (keras_zoo.ZooEntry.build, keras_zoo.application, tf_graphs.frozen_keras,
                   tf_graphs._randomize, tf_graphs.keras):
        assert inspect.getsource(helper) in sources, helper.__name__
    assert "'ResNet50'" in sources and "64" in sources
    assert entry.digest() == keras_zoo.ZOO["resnet50"].digest()
    digests = {e.digest() for e in keras_zoo.entries()}
    assert len(digests) == len(keras_zoo.ZOO)


def test_new_cache_key_leaves_no_stale_entry(counted_builds, tmp_path):
    keras_zoo.load("softmax")
    stale = tmp_path / "softmax--tf0-k0--0123456789abcdef.npz"
    os.replace(keras_zoo.cache_path(keras_zoo.ZOO["softmax"]), stale)
    keras_zoo.load("softmax")
    assert [p.name for p in tmp_path.iterdir()] == [
        keras_zoo.cache_path(keras_zoo.ZOO["softmax"]).name]
