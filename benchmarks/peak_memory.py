"""Peak memory of the digits CNN training step (batch 64, Adam; the model of
benchmarks/train_step.py, built here for any batch): minigraph with its memory planner on
and off, PyTorch eager (NCHW and channels_last) and TensorFlow (tf.function), each in its
own process, 2 threads each.

Per framework: the resident set after import and model construction, the peak resident set
(``VmHWM``) after 20 training steps, and the growth between the two (what the steps
themselves added). For minigraph also the peak bytes of live intermediates that
``RunMetadata`` reports for one step (``client/planner.py``).

    python benchmarks/peak_memory.py [--steps 20] [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table  # noqa: E402

FRAMEWORKS = ("minigraph", "minigraph, planner off", "pytorch eager", "pytorch channels_last",
              "tensorflow tf.function")


def _status(field: str) -> float:
    """``field`` of /proc/self/status in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def _data(batch: int):
    from minigraph.examples.train_digits_cnn import load_digits

    x, y, _, _ = load_digits(0)
    return x[:batch], y[:batch]


def _minigraph(planner: bool, batch: int):
    import minigraph as mg
    from minigraph.examples.train_digits_cnn import build, parse

    g = build(parse([]))
    session = mg.ClientSession(g["root"], optimizer=mg.OptimizerOptions(
        memory_planner=planner))
    session.Run({}, [], targets=mg.train.global_variables_initializer(g["root"]))
    x, y = _data(batch)
    feeds = {g["images"]: x, g["labels"]: y}

    def step():
        session.Run(feeds, [g["loss"]], targets=g["step"])

    def planned() -> int:
        metadata = mg.RunMetadata()
        session.Run(feeds, [g["loss"]], targets=g["step"], run_metadata=metadata)
        return metadata.peak_bytes

    return step, planned


def _torch(channels_last: bool, batch: int):
    import torch

    torch.set_num_threads(2)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32, eps=1e-3), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64, eps=1e-3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    x, y = _data(batch)
    images = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.to(memory_format=torch.channels_last)
    labels = torch.from_numpy(y).long()

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step, None


def _tensorflow(batch: int):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(2)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)

    def variable(*shape, fill=None):
        value = (rng.standard_normal(shape) * 0.1 if fill is None else np.full(shape, fill))
        return tf.Variable(value.astype(np.float32))

    weights = [variable(3, 3, 1, 32), variable(32, fill=1), variable(32, fill=0),
               variable(3, 3, 32, 64), variable(64, fill=1), variable(64, fill=0),
               variable(1024, 10), variable(10, fill=0)]
    slots = [(tf.Variable(tf.zeros_like(w)), tf.Variable(tf.zeros_like(w))) for w in weights]
    x, y = _data(batch)
    images, labels = tf.constant(x), tf.constant(y)

    def conv_bn_relu(h, kernel, scale, offset):
        h = tf.nn.conv2d(h, kernel, 1, "SAME")
        h = tf.raw_ops.FusedBatchNormV3(x=h, scale=scale, offset=offset, mean=[], variance=[],
                                        epsilon=1e-3, is_training=True)[0]
        return tf.nn.relu(h)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            h = conv_bn_relu(images, *weights[0:3])
            h = conv_bn_relu(h, *weights[3:6])
            h = tf.reshape(tf.nn.max_pool2d(h, 2, 2, "VALID"), [batch, 1024])
            logits = h @ weights[6] + weights[7]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels,
                                                                                 logits))
        for w, g, (m, v) in zip(weights, tape.gradient(loss, weights), slots):  # Adam
            m.assign(0.9 * m + 0.1 * g)
            v.assign(0.999 * v + 0.001 * g * g)
            w.assign_sub(0.003 * m / (tf.sqrt(v) + 1e-7))
        return loss

    return step, None


def child(name: str, steps: int, batch: int) -> dict:
    if name.startswith("minigraph"):
        step, planned = _minigraph("planner off" not in name, batch)
    elif name.startswith("pytorch"):
        step, planned = _torch("channels_last" in name, batch)
    else:
        step, planned = _tensorflow(batch)
    before = _status("VmRSS")
    for _ in range(steps):
        step()
    result = {"before": before, "peak": _status("VmHWM")}
    if planned is not None:
        result["planned"] = planned()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.batch)))
        return
    rows = []
    environment = {**os.environ, "MINIGRAPH_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    for name in FRAMEWORKS:
        process = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name,
                                  "--steps", str(args.steps), "--batch", str(args.batch)],
                                 capture_output=True, text=True, env=environment)
        if process.returncode:
            rows.append([name, "failed: " + process.stderr.strip().splitlines()[-1], "", "",
                         ""])
            continue
        result = json.loads(process.stdout.strip().splitlines()[-1])
        planned = result.get("planned")
        rows.append([name, f"{result['before']:.0f}", f"{result['peak']:.0f}",
                     f"{result['peak'] - result['before']:.1f}",
                     "-" if planned is None else f"{planned / 2**20:.2f}"])
    print(f"# Digits CNN training step, batch {args.batch}, {args.steps} steps, 2 threads\n")
    print(markdown_table(["framework", "RSS after setup MiB", "peak RSS MiB",
                          "growth in the steps MiB", "planned peak of intermediates MiB"],
                         rows))


if __name__ == "__main__":
    main()
