"""minigraph.viz: DOT text (golden files), pruning, collapsing, rendering, notebooks, the CLI.

The golden DOT files live in ``tests/golden/``. After an intended change to the drawing (or to
how the core names nodes), regenerate them and review the diff::

    MINIGRAPH_UPDATE_GOLDEN=1 python -m pytest tests/test_viz.py
    git diff tests/golden/

Rendering tests run Graphviz's ``dot`` and are skipped only where it is not installed (CI
installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import minigraph as mg
from minigraph import ops, viz
from minigraph.errors import InvalidArgumentError, UnavailableError

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[1]
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot program is not installed")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("MINIGRAPH_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with MINIGRAPH_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"DOT text differs from {path}; if the change is intended, "
                              f"regenerate with MINIGRAPH_UPDATE_GOLDEN=1 and review the diff")


# ----------------------------------------------------------------------------- graphs


def bn_forward() -> tuple[mg.Scope, object]:
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 8, 8, 32])
    scale = ops.Const(root.WithOpName("scale"), np.ones(32, np.float32))
    offset = ops.Const(root.WithOpName("offset"), np.zeros(32, np.float32))
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, scale, offset, empty, empty,
                              epsilon=1e-3, data_format="NHWC", is_training=True)
    return root, bn


def bn_forward_grad() -> tuple[mg.Scope, object, object]:
    """Forward BN and, under ``gradients/``, its FusedBatchNormGradV3 fed by the reserve spaces
    (built by hand with a placeholder seed, so it does not depend on autodiff or math ops)."""
    root, bn = bn_forward()
    op = bn.operation
    grads = root.NewSubScope("gradients")
    dy = ops.Placeholder(grads.WithOpName("dy"), mg.float32, shape=[None, 8, 8, 32])
    grad = ops.FusedBatchNormGradV3(
        grads.NewSubScope("FusedBatchNormV3_grad"), dy, op.inputs[0], op.inputs[1],
        bn.reserve_space_1, bn.reserve_space_2, bn.reserve_space_3, epsilon=1e-3)
    return root, bn, grad


def nested_scopes() -> mg.Scope:
    """Nested scopes, bf16 and unknown-rank edges, NCHW inference, a device, a control
    dependency, a deprecated op and names that need escaping."""
    root = mg.Scope.NewRootScope()
    model = root.NewSubScope("model")
    x = ops.Placeholder(root.WithOpName("images"), mg.bfloat16, shape=[None, 3, 4, 4])
    h = x
    for i in range(2):
        block = model.NewSubScope(f"block{i}").WithDevice("/device:CPU:0")
        c = np.full(3, 0.5 + i, np.float32)
        params = [ops.Const(block.WithOpName(n), c) for n in ("gamma", "beta", "mean", "var")]
        bn = ops.FusedBatchNormV3(block, h, *params, ops.FusedBatchNormV3.Attrs()
                                  .DataFormat("NCHW").IsTraining(False).Epsilon(1e-5)
                                  .ExponentialAvgFactor(0.9))
        h = ops.Identity(block.WithOpName("act"), bn.y)
    t = ops.Placeholder(root.WithOpName('odd "name" <&>'), mg.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        v = np.ones(2, np.float32)
        legacy = ops.BatchNormWithGlobalNormalization(
            model.NewSubScope("legacy").WithControlDependencies(h), t, v, v, v, v, 1e-3, True)
    ops.Identity(root.WithOpName("out"), legacy)
    return root


# ----------------------------------------------------------------------------- golden text


def test_golden_bn_forward():
    root, _ = bn_forward()
    check_golden("bn_forward.dot", viz.to_dot(root))


def test_golden_bn_forward_grad():
    root, _, _ = bn_forward_grad()
    text = viz.to_dot(root)
    check_golden("bn_forward_grad.dot", text)
    # the conventions the golden file pins down, spelled out
    assert 'subgraph "cluster_gradients" {' in text
    assert 'style="dashed,rounded,filled"' in text
    assert ('"bn" -> "gradients/FusedBatchNormV3_grad/FusedBatchNormGradV3" '
            '[xlabel="reserve_space_1\\nf32[32]", style=dotted') in text
    assert '"x" -> "bn" [xlabel="f32[?,8,8,32]", weight=4];' in text
    assert "<b>FusedBatchNormV3</b>" in text and "NHWC · training · eps=0.001" in text


def test_golden_nested_scopes():
    text = viz.to_dot(nested_scopes(), legend=True)
    check_golden("nested_scopes.dot", text)
    assert 'subgraph "cluster_model/block0" {' in text  # nested cluster
    assert "bf16[?,3,4,4]" in text and "f32[*]" in text
    assert "NCHW · inference · eps=1e-05 · avg_factor=0.9" in text
    assert '"odd \\"name\\" <&>"' in text and "odd &quot;name&quot; &lt;&amp;&gt;" in text
    assert 'style="rounded,filled,dashed"' in text  # the deprecated op
    assert "arrowhead=odot" in text  # the control dependency
    assert "@/device:CPU:0" in text


def test_same_graph_same_text():
    assert viz.to_dot(bn_forward_grad()[0]) == viz.to_dot(bn_forward_grad()[0])
    assert viz.to_dot(nested_scopes(), legend=True) == viz.to_dot(nested_scopes(), legend=True)


def test_same_text_across_processes():
    code = ("import warnings; warnings.simplefilter('ignore'); import sys; "
            "sys.path.insert(0, 'tests'); import test_viz as t; from minigraph import viz; "
            "print(viz.to_dot(t.nested_scopes(), legend=True), end='')")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out == viz.to_dot(nested_scopes(), legend=True)


def test_edge_labels():
    root, bn = bn_forward()
    text = viz.to_dot(root)
    # single-output producers: dtype and shape only; multi-output: output name first
    assert '"scale" -> "bn" [xlabel="f32[32]"];' in text
    out = ops.Identity(root.WithOpName("y"), bn.y)
    ops.Identity(root.WithOpName("scalar"), ops.Const(root.WithOpName("c"), 2.0))
    text = viz.to_dot(root)
    assert f'"bn" -> "{out.op.name}" [xlabel="y\\nf32[?,8,8,32]"];' in text
    assert '"c" -> "scalar" [xlabel="f32[]"];' in text
    plain = viz.to_dot(root, show_shapes=False)
    assert '"scale" -> "bn";' in plain and '"bn" -> "y" [xlabel="y"];' in plain
    assert not [line for line in plain.splitlines() if '" -> "' in line and 'f32[' in line]


def test_op_categories():
    assert viz.op_category("FusedBatchNormV3") == "normalization"
    assert viz.op_category("FusedBatchNormGradGrad") == "normalization"
    assert viz.op_category("Conv2D") == "convolution"
    assert viz.op_category("MatMul") == "convolution"
    assert viz.op_category("Mul") == "math"
    assert viz.op_category("ApplyAdam") == "training"
    assert viz.op_category("ResourceApplyFtrl") == "training"
    assert viz.op_category("VariableV2") == "state"
    assert viz.op_category("Placeholder") == "io"
    assert viz.op_category("ReluGrad") == "activation"
    assert viz.op_category("SomethingNew") == "other"
    assert set(viz.OP_CATEGORIES.values()) <= set(viz.CATEGORIES)


# ----------------------------------------------------------------------------- fetches, collapse


def test_fetches_prune_to_what_is_needed():
    root, bn, grad = bn_forward_grad()
    extra = ops.Identity(root.WithOpName("unrelated"), ops.Const(root.WithOpName("k"), 1.0))
    text = viz.to_dot(root, fetches=bn.y)
    assert '"bn" [' in text and '"x" [' in text and '"bn/mean" [' in text
    assert "gradients" not in text and "unrelated" not in text
    assert 'style="rounded,filled,bold"' in text  # the fetched op stands out
    whole = viz.to_dot(root, fetches=[grad.x_backprop, extra.op])
    assert "gradients/FusedBatchNormV3_grad/FusedBatchNormGradV3" in whole
    assert '"unrelated" [' in whole
    # op names work too, and control inputs are followed
    c = ops.Identity(root.WithOpName("after").WithControlDependencies(extra), bn.y)
    by_name = viz.to_dot(root, fetches=c.op.name)
    assert '"unrelated" -> "after" [style=dashed' in by_name
    with pytest.raises(InvalidArgumentError, match="'nope' refers to an Operation not in the"):
        viz.to_dot(root, fetches="nope")
    with pytest.raises(InvalidArgumentError, match="another graph"):
        viz.to_dot(root, fetches=bn_forward()[1].y)


def test_collapse_draws_a_scope_as_one_box():
    root, bn, grad = bn_forward_grad()
    text = viz.to_dot(root, collapse=["gradients"])
    assert '"gradients" [label=<<b>gradients/</b>' in text and "2 ops" in text
    assert "cluster_gradients" not in text
    assert "FusedBatchNormGradV3\"" not in text  # no member node is drawn
    # edges into the group are redrawn to its box, once per distinct tensor
    assert text.count('"x" -> "gradients"') == 1
    assert '"bn" -> "gradients" [xlabel="reserve_space_1\\nf32[32]", style=dotted' in text
    inner = viz.to_dot(root, collapse="gradients/FusedBatchNormV3_grad/")
    assert 'subgraph "cluster_gradients" {' in inner
    assert '"gradients/FusedBatchNormV3_grad" [label=<<b>FusedBatchNormV3_grad/</b>' in inner
    assert '"gradients/dy" -> "gradients/FusedBatchNormV3_grad"' in inner
    with pytest.raises(InvalidArgumentError, match="matches no operation.*gradients"):
        viz.to_dot(root, collapse=["gradient"])


def test_bad_argument():
    with pytest.raises(InvalidArgumentError, match="Graph or a Scope"):
        viz.to_dot("graph")


# ----------------------------------------------------------------------------- rendering


@needs_dot
def test_render_svg_png_pdf(tmp_path):
    root = nested_scopes()
    bn_root, _, _ = bn_forward_grad()
    svg = viz.render(bn_root, tmp_path / "g.svg", legend=True)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "gradients/FusedBatchNormV3_grad/FusedBatchNormGradV3" in text
    assert "reserve_space_1" in text
    png = viz.render(root, tmp_path / "nested", format="png")
    assert png.name == "nested.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = viz.render(root, tmp_path / "nested.pdf", collapse=["model"])
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert not (tmp_path / "g.dot").exists()  # the .dot file is only left when dot is missing


def test_render_dot_format_needs_no_graphviz(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    root, _ = bn_forward()
    out = viz.render(root, tmp_path / "g.dot")
    assert out.read_text() == viz.to_dot(root)
    with pytest.raises(InvalidArgumentError, match="ends in .png but format is 'svg'"):
        viz.render(root, tmp_path / "g.png", format="svg")


def assert_clear(exc: BaseException, dot_file: Path) -> None:
    message = str(exc)
    assert "apt-get install graphviz" in message and "brew install graphviz" in message
    assert str(dot_file) in message
    assert exc.__cause__ is None and exc.__suppress_context__  # no graphviz traceback


def test_without_dot_program_writes_dot_file_and_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    root, _ = bn_forward()
    with pytest.raises(UnavailableError) as info:
        viz.render(root, tmp_path / "graph.svg")
    dot_file = tmp_path / "graph.dot"
    assert dot_file.read_text() == viz.to_dot(root)
    assert not (tmp_path / "graph.svg").exists()
    assert "'dot' program is not on PATH" in str(info.value)
    assert f"dot -Tsvg {dot_file} -o {tmp_path / 'graph.svg'}" in str(info.value)
    assert_clear(info.value, dot_file)


def test_graphviz_package_errors_do_not_escape(tmp_path, monkeypatch):
    pytest.importorskip("graphviz")
    # even when our own PATH check is bypassed, graphviz's ExecutableNotFound is translated
    monkeypatch.setattr("minigraph.viz.rendering._check_dot", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    root, _ = bn_forward()
    with pytest.raises(UnavailableError) as info:
        viz.render(root, tmp_path / "graph.png")
    assert_clear(info.value, tmp_path / "graph.dot")


def test_without_graphviz_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # makes `import graphviz` fail
    root, _ = bn_forward()
    with pytest.raises(UnavailableError, match="'graphviz' Python package is not installed; "
                                               "install it with: pip install graphviz") as info:
        viz.render(root, tmp_path / "graph.svg")
    assert (tmp_path / "graph.dot").exists()
    assert_clear(info.value, tmp_path / "graph.dot")
    drawing = viz.draw(root)
    assert "pip install graphviz" in repr(drawing)  # Jupyter may ask for text/plain first
    assert drawing._repr_svg_() is None  # then it shows that text instead of an error
    assert "pip install graphviz" in repr(drawing)


def test_import_minigraph_does_not_import_graphviz():
    code = "import sys, minigraph; print('graphviz' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


@needs_dot
def test_draw_shows_inline_svg():
    root, _, _ = bn_forward_grad()
    drawing = viz.draw(root, collapse=["gradients"])
    assert drawing.source == viz.to_dot(root, collapse=["gradients"])
    svg = drawing._repr_svg_()
    assert svg is not None and "<svg" in svg and ">bn<" in svg
    assert "7 nodes" in repr(drawing)


# ----------------------------------------------------------------------------- command line

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import minigraph as mg
    from minigraph import ops

    def build(n):
        root = mg.Scope.NewRootScope()
        x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 4])
        for i in range(n):
            x = ops.Identity(root.NewSubScope(f"layer{i}"), x)
        return root

    def main():
        small, large = build(1), build(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
        print("built", len(small.graph()), len(large.graph()))

    if __name__ == "__main__":
        main()
""")


def test_cli_draws_the_largest_graph(tmp_path, capsys):
    from minigraph.__main__ import main

    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    assert main(["viz", str(script), "-o", str(tmp_path / "g.dot"), "--", "5"]) == 0
    text = (tmp_path / "g.dot").read_text()
    assert "layer4" in text and "cluster_layer4" in text
    assert "built 2 6" in capsys.readouterr().out
    assert main(["viz", str(script), "-o", str(tmp_path / "small.dot"), "--graph-index",
                 "0"]) == 0
    assert "layer1" not in (tmp_path / "small.dot").read_text()
    assert main(["viz", str(script), "--list"]) == 0
    assert "created 2 graph(s): #0: 2 ops, #1: 4 ops" in capsys.readouterr().out
    assert main(["viz", str(script), "--graph-index", "7"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_cli_draws_what_a_failing_script_built(tmp_path, capsys):
    from minigraph.__main__ import main

    script = tmp_path / "broken.py"
    script.write_text(SCRIPT.replace('print("built",', 'raise RuntimeError("boom", '))
    assert main(["viz", str(script), "-o", str(tmp_path / "g.dot")]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: ('boom'" in err and "drawing the graphs it built before that" in err
    assert "layer2" in (tmp_path / "g.dot").read_text()


def test_cli_without_dot_explains(tmp_path, capsys, monkeypatch):
    from minigraph.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    assert main(["viz", str(script), "-o", str(tmp_path / "g.svg")]) == 1
    err = capsys.readouterr().err
    assert "apt-get install graphviz" in err and (tmp_path / "g.dot").exists()


@needs_dot
def test_cli_subprocess_svg(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "graph.svg"
    result = subprocess.run([sys.executable, "-m", "minigraph", "viz", str(script), "-o",
                             str(out)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "drew graph #1 (4 ops)" in result.stdout
    assert "<svg" in out.read_text() and "layer2" in out.read_text()
