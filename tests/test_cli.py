"""The command line, as a newcomer meets it: ``python -m minigraph ...`` in a subprocess.

Help texts list every option; errors name the command (``python -m minigraph demo``), never
``__main__.py``; ``--version``; ``viz`` draws a saved graph file (read, never executed); a
one-epoch demo on a small subset says which backend ran and writes plain lines (no ``\\r``)
when piped; ``loss.png`` has a log loss axis; ``check`` reports the optional components, and
under CI (``CI=true``) every component CI installs must be there (no silent skips).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.interop import protos, records

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def run(*args: str, cwd: Path | None = None, timeout: float = 300,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m minigraph ARGS`` with stdout and stderr piped (not a terminal)."""
    return subprocess.run([sys.executable, "-m", "minigraph", *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


DEMO_OPTIONS = ("--epochs", "--batch-size", "--optimizer", "--data-format", "--dtype",
                "--backend", "--resume", "--predict", "--no-plots", "--train-size")


def test_top_level_help_lists_the_commands_and_version():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m minigraph")
    for command in ("demo", "tour", "viz", "check", "--version"):
        assert command in result.stdout
    version = run("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"minigraph {mg.__version__}"


def test_demo_help_lists_its_options():
    result = run("demo", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m minigraph demo")
    missing = [option for option in DEMO_OPTIONS if option not in result.stdout]
    assert not missing, f"demo --help does not list {missing}:\n{result.stdout}"


def test_tour_and_viz_help_list_their_options():
    tour = run("tour", "--help")
    assert tour.returncode == 0, tour.stderr
    assert tour.stdout.startswith("usage: python -m minigraph tour")
    assert "--data-format" in tour.stdout and "--backend" in tour.stdout
    viz = run("viz", "--help")
    assert viz.returncode == 0, viz.stderr
    assert viz.stdout.startswith("usage: python -m minigraph viz")
    for option in ("--output", "--format", "--collapse", "graph file"):
        assert option in viz.stdout


@pytest.mark.parametrize("command", ["demo", "tour", "viz", "check"])
def test_errors_name_the_command_not_main_py(command):
    result = run(command, "--no-such-option")
    assert result.returncode == 2
    assert "__main__.py" not in result.stderr
    assert f"python -m minigraph {command}: error:" in result.stderr
    top = run("no-such-command")
    assert top.returncode == 2 and "python -m minigraph: error:" in top.stderr


def small_graph_file(folder: Path) -> Path:
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[2, 3, 3, 4])
    empty = np.zeros(0, np.float32)
    bn = ops.FusedBatchNormV3(root.WithOpName("bn"), x, np.ones(4, np.float32),
                              np.zeros(4, np.float32), empty, empty, is_training=True)
    ops.Identity(root.WithOpName("y"), bn.y)
    return Path(mg.io.write_graph(root, folder / "model.json"))


def test_viz_draws_a_graph_file(tmp_path):
    path = small_graph_file(tmp_path)
    result = run("viz", str(path), "-o", str(tmp_path / "g.dot"))
    assert result.returncode == 0, result.stderr
    assert "drew the graph of" in result.stdout
    text = (tmp_path / "g.dot").read_text()
    assert text.startswith("digraph") and "FusedBatchNormV3" in text
    listed = run("viz", str(path), "--list")
    assert listed.returncode == 0 and "holds 1 graph" in listed.stdout


@pytest.mark.skipif(shutil.which("dot") is None and not IN_CI,
                    reason="Graphviz's dot program is not installed (CI installs it)")
def test_viz_renders_a_graph_file_to_svg(tmp_path):
    path = small_graph_file(tmp_path)
    result = run("viz", str(path), "-o", str(tmp_path / "g.svg"))
    assert result.returncode == 0, result.stderr
    assert "<svg" in (tmp_path / "g.svg").read_text()


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_viz_draws_a_graph_def(tmp_path, suffix):
    root = mg.io.read_graph(small_graph_file(tmp_path))
    path = tmp_path / f"model{suffix}"
    mg.export_graph_def(root, path)
    result = run("viz", str(path), "-o", str(tmp_path / "g.dot"))
    assert result.returncode == 0, result.stderr
    assert f"drew the graph of {path} (" in result.stdout
    text = (tmp_path / "g.dot").read_text()
    assert "FusedBatchNormV3" in text and '"bn"' in text
    path.write_bytes(b"\xff\xff")
    failed = run("viz", str(path), "-o", str(tmp_path / "bad.dot"))
    assert failed.returncode == 1 and "is not a" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_viz_never_executes_a_json_file(tmp_path):
    marker = tmp_path / "executed"
    bad = tmp_path / "model.json"
    bad.write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = run("viz", str(bad), "-o", str(tmp_path / "g.dot"))
    assert result.returncode == 1
    assert not marker.exists()
    assert "minigraph viz:" in result.stderr and "Traceback" not in result.stderr


def test_demo_one_epoch_piped_is_plain_and_names_the_backend(tmp_path):
    result = run("demo", "--epochs", "1", "--train-size", "96", "--batch-size", "32",
                 "--no-plots", "--out", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\r" not in result.stdout and "\r" not in result.stderr
    lines = result.stdout.splitlines()
    from minigraph.backends import native

    if native.available():
        assert re.fullmatch(r"backend: native C kernels \(ISA \w+, \d+ threads\)", lines[0])
    else:
        assert lines[0].startswith("backend: reference")
    assert any(line.startswith("epoch  1: train loss") for line in lines)
    assert any(line.startswith("final test accuracy:") for line in lines)
    assert lines[-1].startswith("reloaded model test accuracy:")
    assert (tmp_path / "digits" / "model.json").is_file()
    [event_file] = (tmp_path / "digits").glob("events.out.tfevents.*")
    with open(event_file, "rb") as file:
        events = [protos.Event().FromString(r) for r in records.read_records(file)]
    assert events[0].file_version == "brain.Event:2"
    assert any(len(e.graph_def) > 1000 for e in events)
    scalars = {(v.tag, e.step) for e in events for v in e.summary.value}
    assert scalars == {(f"{m}/{s}", 1) for m in ("loss", "accuracy") for s in ("train", "test")}


def test_loss_plot_uses_a_log_scale(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from minigraph.examples import train_digits_cnn

    figures = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda self, *a, **k: (figures.append(self), original(self, *a, **k)))
    history = [{"epoch": e, "train_loss": 2.0 / e, "test_loss": 2.5 / e,
                "train_accuracy": 0.5, "test_accuracy": 0.5} for e in (1, 2, 3)]
    train_digits_cnn.plot(history, str(tmp_path / "loss.png"))
    assert (tmp_path / "loss.png").is_file()
    loss_axes = figures[0].axes[0]
    assert loss_axes.get_yscale() == "log"
    assert figures[0].axes[1].get_yscale() == "linear"  # accuracy stays linear


def test_check_reports_each_component():
    result = run("check")
    assert result.returncode == 0
    out = result.stdout + result.stderr
    for component in ("native C kernels", "graphviz dot", "OpenCL"):
        assert component in out
    assert run("check", "nonsense").returncode == 2


@pytest.mark.skipif(not IN_CI, reason="only under CI (CI=true), which installs every component")
def test_ci_uses_every_component_it_installs():
    """CI installs the C compiler's kernels, graphviz's dot and PoCL: a test that would skip
    for lack of one of them must fail the run instead (checked in a fresh process, as PoCL
    cannot share one with TensorFlow)."""
    result = run("check", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr
