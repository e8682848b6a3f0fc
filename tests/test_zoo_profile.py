"""tools/zoo_profile.py: every step of a zoo model's run appears once in the breakdown, each
convolution with the route its kernel took, and the tables add up to the steps' time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import NATIVE_AVAILABLE

pytestmark = [pytest.mark.oracle,  # a cold zoo cache needs TensorFlow to freeze the graph
              pytest.mark.skipif(not NATIVE_AVAILABLE, reason="profiles the native backend")]

TOOL = Path(__file__).resolve().parent.parent / "tools" / "zoo_profile.py"


def _tool():
    spec = importlib.util.spec_from_file_location("zoo_profile", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_lists_every_step_with_its_convolution_route():
    from minigraph.backends import convolution_kernels
    from minigraph.client import session

    tool = _tool()
    route_function, clock = convolution_kernels.forward_route, session.time
    rows = tool.profile("regnet_x002", batch=1, threads=1, runs=2)
    assert (convolution_kernels.forward_route, session.time) == (route_function, clock)
    names = [r[0] for r in rows]
    assert len(names) == len(set(names)) and "Identity" in {r[1] for r in rows}
    convolutions = [r for r in rows if r[1] in ("Conv2D", "_FusedConv2D")]
    assert convolutions and all(r[3] is not None for r in convolutions)
    assert all(r[3] is None for r in rows if "Conv" not in r[1])
    routes = {r[3].split()[0] for r in convolutions}
    assert routes <= {"gemm", "direct", "depthwise"} and len(routes) >= 2
    assert all(r[4] >= 0 for r in rows)
    text = tool.report(rows, top=100)
    whole = sum(r[4] for r in rows)
    by_type = text.split("by op type")[1].split("by kernel")[0].strip().splitlines()[1:]
    assert sum(float(line.split()[0]) for line in by_type) == pytest.approx(whole * 1e3,
                                                                            abs=0.01 * len(rows))
    # --layers: each convolution's FLOPs are 2 * pixels * kh * kw * (c / groups) * co of its
    # route's shape, and the listed rates are those FLOPs over the listed times
    for r in convolutions:
        route, shape = r[3].split(" ", 1)
        words = shape.split()
        kh, kw = map(int, words[0].split("/")[0].split("x"))
        cg, co, pixels = int(words[3]), int(words[5]), int(words[7])
        assert r[5] == 2.0 * pixels * kh * kw * cg * co
    listed = tool.layers(rows, top=3, threads=1, wall=False).splitlines()[3:6]
    slowest = sorted(convolutions, key=lambda r: -r[4])[:3]
    for line, r in zip(listed, slowest, strict=True):
        ms, rate = map(float, line.split()[:2])
        assert r[0] in line and ms == pytest.approx(r[4] * 1e3, abs=0.006)
        assert rate == pytest.approx(r[5] / r[4] / 1e9, abs=0.06)
    # --peak: the convolutions' rate over the FMA peak given
    seconds = sum(r[4] for r in convolutions)
    flops = sum(r[5] for r in rows)
    last = tool.layers(rows, top=1, threads=1, wall=True, peak=50.0).splitlines()[-1]
    share = round(100 * flops / seconds / 1e9 / 50.0)
    assert last.endswith(f", {share} % of the FMA peak (50 GFLOP/s)")
