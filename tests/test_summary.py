"""TensorBoard event files: the CRC32C and record framing against published check values,
and ``mg.summary.FileWriter``'s files read back by TensorBoard's own reader
(``EventAccumulator``) and by TensorFlow's ``summary_iterator``."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

import minigraph as mg
from minigraph import ops
from minigraph.interop import protos, records


def test_crc32c_matches_the_published_check_values():
    # RFC 3720 (iSCSI), appendix B.4, and the CRC catalogue's check value
    assert records.crc32c(b"123456789") == 0xE3069283
    assert records.crc32c(bytes(32)) == 0x8A9136AA
    assert records.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert records.crc32c(bytes(range(32))) == 0x46DD794E
    assert records.crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


def test_masked_crc_is_tensorflows_rotation_plus_constant():
    crc = records.crc32c(b"abc")
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    assert records.masked_crc32c(b"abc") == (rotated + 0xA282EAD8) & 0xFFFFFFFF


def test_records_round_trip_and_corruption_is_caught():
    stream = io.BytesIO()
    payloads = [b"", b"x", bytes(range(256)) * 5]
    for payload in payloads:
        records.write_record(stream, payload)
    data = stream.getvalue()
    assert len(data) == sum(16 + len(p) for p in payloads)
    assert struct.unpack("<Q", data[:8])[0] == 0
    assert records.read_records(io.BytesIO(data)) == payloads
    assert records.read_records(io.BytesIO(data[:-3])) == payloads[:2]  # a record in flight
    corrupt = bytearray(data)
    corrupt[-10] ^= 1
    with pytest.raises(ValueError, match="corrupt record data"):
        records.read_records(io.BytesIO(bytes(corrupt)))
    corrupt = bytearray(data)
    corrupt[0] ^= 1
    with pytest.raises(ValueError, match="corrupt record length"):
        records.read_records(io.BytesIO(bytes(corrupt)))


def _small_graph() -> mg.Scope:
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.float32, shape=[None, 3])
    ops.Relu(root.WithOpName("y"), ops.MatMul(root, x, np.ones((3, 2), np.float32)))
    return root


def _write_run(logdir) -> str:
    with mg.summary.FileWriter(logdir, _small_graph()) as writer:
        for step in range(5):
            writer.add_scalar("loss/train", 1.0 / (step + 1), step)
            writer.add_scalar("accuracy/test", step / 10, step)
        return writer.path


def test_events_are_framed_tensorflow_events(tmp_path):
    path = _write_run(tmp_path)
    with open(path, "rb") as file:
        events = [protos.Event().FromString(r) for r in records.read_records(file)]
    assert events[0].file_version == "brain.Event:2"
    graph_def = protos.GraphDef().FromString(events[1].graph_def)
    assert [n.name for n in graph_def.node][:1] == ["x"]
    points = [(e.step, v.tag, v.simple_value) for e in events[2:] for v in e.summary.value]
    assert points[:2] == [(0, "loss/train", 1.0), (0, "accuracy/test", 0.0)]
    assert all(e.wall_time > 1.6e9 for e in events)


def test_tensorboard_reads_the_scalars_and_the_graph(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    _write_run(tmp_path)
    accumulator = event_accumulator.EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert sorted(accumulator.Tags()["scalars"]) == ["accuracy/test", "loss/train"]
    loss = accumulator.Scalars("loss/train")
    assert [s.step for s in loss] == list(range(5))
    np.testing.assert_allclose([s.value for s in loss], 1.0 / np.arange(1, 6), rtol=1e-7)
    assert {n.name for n in accumulator.Graph().node} >= {"x", "y", "MatMul"}


@pytest.mark.oracle
def test_tensorflow_reads_the_event_file(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = _write_run(tmp_path)
    events = list(tf.compat.v1.train.summary_iterator(path))
    assert events[0].file_version == "brain.Event:2"
    values = [(e.step, v.tag, v.simple_value) for e in events for v in e.summary.value]
    assert (4, "loss/train", pytest.approx(0.2)) in values
    assert tf.compat.v1.GraphDef.FromString(events[1].graph_def).node[0].name == "x"


def test_each_writer_has_its_own_file_and_flushes_append(tmp_path):
    first, second = mg.summary.FileWriter(tmp_path), mg.summary.FileWriter(tmp_path)
    assert first.path != second.path
    first.add_scalar("a", 1.0, 0)
    first.flush()
    first.add_scalar("a", 2.0, 1)
    first.close()
    second.close()
    with open(first.path, "rb") as file:
        assert len(records.read_records(file)) == 3  # file_version + two scalars


def test_bad_arguments_are_refused(tmp_path):
    writer = mg.summary.FileWriter(tmp_path)
    for tag, value, step, match in [("", 1.0, 0, "tag must be a non-empty string"),
                                    ("a", "x", 0, "value must be a number"),
                                    ("a", 1.0, 1.5, "step must be an int"),
                                    ("a", 1.0, True, "step must be an int")]:
        with pytest.raises(mg.errors.InvalidArgumentError, match=match):
            writer.add_scalar(tag, value, step)
    with pytest.raises(mg.errors.InvalidArgumentError, match="expected a Graph or a Scope"):
        writer.add_graph("graph")
    writer.close()
    with pytest.raises(mg.errors.InvalidArgumentError, match="is closed"):
        writer.add_scalar("a", 1.0, 0)


def test_graphs_with_minigraph_only_ops_are_drawn_as_they_are(tmp_path):
    root = mg.Scope.NewRootScope()
    x = ops.Placeholder(root.WithOpName("x"), mg.int32, shape=[3])
    ops.ReducedShape(root.WithOpName("reduced"), x, np.array([1], np.int32))
    with mg.summary.FileWriter(tmp_path, root) as writer:
        path = writer.path
    with open(path, "rb") as file:
        graph_event = protos.Event().FromString(records.read_records(file)[1])
    nodes = protos.GraphDef().FromString(graph_event.graph_def).node
    assert [n.op for n in nodes] == ["Placeholder", "Const", "ReducedShape"]
