"""Train a small CNN on scikit-learn's bundled 8x8 digits with minigraph, end to end.

Model: Conv(1->32, 3x3) - BN - ReLU - Conv(32->64, 3x3) - BN - ReLU - MaxPool(2) - Dense(10).
One graph holds the training step (batch norm in training mode, updating its moving
statistics with exponential_avg_factor) and the inference path (batch norm in inference
mode with the same weights). Writes to ``runs/<name>/``: ``loss.png`` (train/test loss, log
scale, and accuracy per epoch), ``graph.svg`` (the training graph, when graphviz is installed),
``checkpoint.npz``, ``model.json``/``model.json.npz`` (the graph) and a TensorBoard event file
(the loss and accuracy curves and the graph: ``tensorboard --logdir runs``), then reloads the
model in a fresh process to predict, and prints the final test accuracy.

It prints first which backend runs the kernels (for the native C kernels: the instruction set
and thread count). On a terminal a progress bar follows each epoch's batches; when the output
is piped to a file there is one plain line per epoch instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import minigraph as mg
from minigraph import nn, ops

MODEL_INPUT, MODEL_LOGITS = "images", "eval/logits"


def load_digits(seed: int) -> tuple[np.ndarray, ...]:
    """(x_train, y_train, x_test, y_test): NHWC float32 in [0, 1], 80/20 split by ``seed``."""
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return images[train], labels[train], images[test], labels[test]


class DigitsCNN:
    def __init__(self, scope: mg.Scope, data_format: str, seed: int) -> None:
        self.data_format = data_format
        model = scope.NewSubScope("model")
        self.conv1 = nn.Conv2D(model, "conv1", 1, 32, 3, data_format=data_format, seed=seed)
        self.bn1 = nn.BatchNorm(model, "bn1", 32, data_format=data_format)
        self.conv2 = nn.Conv2D(model, "conv2", 32, 64, 3, data_format=data_format,
                               seed=seed + 1)
        self.bn2 = nn.BatchNorm(model, "bn2", 64, data_format=data_format)
        self.dense = nn.Dense(model, "dense", 64 * 4 * 4, 10, seed=seed + 2)
        self.variables = [v for layer in (self.conv1, self.bn1, self.conv2, self.bn2,
                                          self.dense) for v in layer.variables]

    def __call__(self, scope: mg.Scope, images: mg.Output, *, training: bool,
                 compute_dtype: mg.DType) -> mg.Output:
        x = images
        if self.data_format == "NCHW":
            x = ops.Transpose(scope, x, [0, 3, 1, 2])
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2)):
            x = nn.relu(scope, bn(scope, conv(scope, x), training=training,
                                  compute_dtype=compute_dtype))
        x = nn.max_pool(scope, x, 2, data_format=self.data_format)
        if self.data_format == "NCHW":  # flatten in NHWC order: the same model in both layouts
            x = ops.Transpose(scope, x, [0, 2, 3, 1])
        return ops.Identity(scope.WithOpName("logits"), self.dense(scope, nn.flatten(scope, x)))


def build(args: argparse.Namespace) -> dict:
    root = mg.Scope.NewRootScope()
    images = ops.Placeholder(root.WithOpName(MODEL_INPUT), mg.float32, shape=[None, 8, 8, 1])
    labels = ops.Placeholder(root.WithOpName("labels"), mg.int32, shape=[None])
    model = DigitsCNN(root, args.data_format, args.seed)
    compute_dtype = mg.as_dtype(args.dtype)
    train_scope = root.NewSubScope("train")
    logits = model(train_scope, images, training=True, compute_dtype=compute_dtype)
    loss = nn.sparse_softmax_cross_entropy(train_scope, logits, labels)
    accuracy = nn.accuracy(train_scope, logits, labels)
    optimizer = (mg.train.Adam(args.learning_rate) if args.optimizer == "adam"
                 else mg.train.Momentum(args.learning_rate, 0.9))
    step = optimizer.minimize(train_scope, loss, model.variables)
    step += root.graph().get_collection(nn.UPDATE_OPS)
    eval_scope = root.NewSubScope("eval")
    eval_logits = model(eval_scope, images, training=False, compute_dtype=compute_dtype)
    return {"root": root, "images": images, "labels": labels, "loss": loss,
            "accuracy": accuracy, "step": step, "eval_logits": eval_logits,
            "eval_loss": nn.sparse_softmax_cross_entropy(eval_scope, eval_logits, labels),
            "eval_accuracy": nn.accuracy(eval_scope, eval_logits, labels)}


def evaluate(session: mg.ClientSession, g: dict, x: np.ndarray, y: np.ndarray
             ) -> tuple[float, float]:
    loss, accuracy = session.Run({g["images"]: x, g["labels"]: y},
                                 [g["eval_loss"], g["eval_accuracy"]])
    return float(loss), float(accuracy)


def plot(history: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("train_loss", "train"), ("test_loss", "test")):
        left.plot(epochs, [h[key] for h in history], marker="o", label=label)
    for key, label in (("train_accuracy", "train"), ("test_accuracy", "test")):
        right.plot(epochs, [h[key] for h in history], marker="o", label=label)
    left.set(title="loss (log scale)", xlabel="epoch", yscale="log")
    right.set(title="accuracy", xlabel="epoch")
    left.legend()
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def draw_graph(root: mg.Scope, path: str) -> str | None:
    try:
        from minigraph import viz

        viz.render(root, path, format="svg")
        return path
    except Exception as exc:  # graphviz missing: the demo still trains  # noqa: BLE001
        print(f"(graph drawing skipped: {exc})")
        return None


def train(args: argparse.Namespace) -> dict:
    """Train with BLAS limited to ``args.blas_threads`` (small matmuls: threads cost more than
    they give, and multi-threaded OpenBLAS collapses when another process takes a core)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(args.blas_threads, user_api="blas"):
        return _train(args)


def backend_line(session: mg.ClientSession) -> str:
    """One line saying what runs the kernels: the C kernels' ISA and threads, or numpy."""
    from minigraph.backends import native

    if session.backend == "native":
        return (f"backend: native C kernels (ISA {native.isa()}, {native.num_threads()} "
                f"threads)")
    reason = native.unavailable_reason()
    why = f"; native C kernels not built: {reason}" if reason else ""
    return f"backend: {session.backend} (numpy{why})"


def _train(args: argparse.Namespace) -> dict:
    from tqdm import tqdm

    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits(args.seed)
    if args.train_size is not None:
        x_train, y_train = x_train[:args.train_size], y_train[:args.train_size]
    g = build(args)
    session = mg.ClientSession(g["root"], backend=args.backend)
    if not args.quiet:
        print(backend_line(session), flush=True)
    # tqdm redraws its bar with '\r' on stderr: only on a terminal, never into a log file
    progress = not args.quiet and sys.stderr.isatty()
    run_dir = os.path.join(args.out, args.name)
    os.makedirs(run_dir, exist_ok=True)
    checkpoint = os.path.join(run_dir, "checkpoint.npz")
    saver = mg.train.Saver(g["root"])
    history_path = os.path.join(run_dir, "history.json")
    history: list[dict] = []
    if args.resume and os.path.exists(checkpoint):
        saver.restore(session, checkpoint)
        with open(history_path) as file:
            history = json.load(file)
    else:
        session.Run({}, [], targets=mg.train.global_variables_initializer(g["root"]))
    rng = np.random.default_rng(args.seed)
    for _ in history:  # replay the data order of finished epochs: resuming continues the curve
        rng.permutation(len(y_train))
    first = len(history) + 1
    events = mg.summary.FileWriter(run_dir, g["root"])  # a new event file per run
    for epoch in range(first, first + args.epochs):
        order = rng.permutation(len(y_train))
        batches = range(0, len(order), args.batch_size)
        losses, accuracies = [], []
        bar = tqdm(batches, desc=f"epoch {epoch}/{first + args.epochs - 1}", leave=False,
                   disable=not progress)
        for begin in bar:
            index = order[begin:begin + args.batch_size]
            loss, accuracy = session.Run({g["images"]: x_train[index],
                                          g["labels"]: y_train[index]},
                                         [g["loss"], g["accuracy"]], targets=g["step"])
            losses.append(float(loss))
            accuracies.append(float(accuracy))
            bar.set_postfix(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}")
        test_loss, test_accuracy = evaluate(session, g, x_test, y_test)
        history.append({"epoch": epoch, "train_loss": float(np.mean(losses)),
                        "train_accuracy": float(np.mean(accuracies)),
                        "test_loss": test_loss, "test_accuracy": test_accuracy})
        for key, value in history[-1].items():
            if key != "epoch":  # "train_loss" -> "loss/train": one chart per metric
                split, metric = key.split("_", 1)
                events.add_scalar(f"{metric}/{split}", value, epoch)
        events.flush()  # TensorBoard shows each epoch as it ends
        if not args.quiet:
            print(f"epoch {epoch:2d}: train loss {history[-1]['train_loss']:.4f} "
                  f"acc {history[-1]['train_accuracy']:.4f} | test loss {test_loss:.4f} "
                  f"acc {test_accuracy:.4f}", flush=True)
    events.close()
    saver.save(session, checkpoint)
    mg.io.write_graph(g["root"], os.path.join(run_dir, "model.json"))
    with open(history_path, "w") as file:
        json.dump(history, file, indent=1)
    if not args.no_plots:
        plot(history, os.path.join(run_dir, "loss.png"))
        draw_graph(g["root"], os.path.join(run_dir, "graph.svg"))
    return {"history": history, "run_dir": run_dir, "seconds": time.perf_counter() - start,
            "test_accuracy": history[-1]["test_accuracy"] if history else None}


def predict(run_dir: str, seed: int) -> float:
    """Reload the exported graph and checkpoint (a fresh process) and score the test set."""
    graph = mg.io.read_graph(os.path.join(run_dir, "model.json"))
    session = mg.ClientSession(graph)
    mg.train.Saver(graph).restore(session, os.path.join(run_dir, "checkpoint.npz"))
    _, _, x_test, y_test = load_digits(seed)
    images = graph.get_operation(MODEL_INPUT).outputs[0]
    logits = graph.get_operation(MODEL_LOGITS).outputs[0]
    predictions = session.Run({images: x_test}, logits).argmax(axis=1)
    return float((predictions == y_test).mean())


def training_parser(description: str, *, epochs: int, name: str,
                    prog: str | None = None) -> argparse.ArgumentParser:
    """The flags every digits training script shares (this one and the MPI one)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=epochs,
                        help="epochs to train (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="global batch size (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="weights, data split and order (default: %(default)s)")
    parser.add_argument("--optimizer", choices=["adam", "momentum"], default="adam",
                        help="default: %(default)s")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="default: 0.003 for adam, 0.05 for momentum")
    parser.add_argument("--data-format", choices=["NHWC", "NCHW"], default="NHWC",
                        help="the layout of the activations (default: %(default)s)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="batch norm's compute dtype (default: %(default)s)")
    parser.add_argument("--backend", choices=["native", "reference"], default=None,
                        help="the CPU kernels (default: native when the C kernels are built)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads for the matmuls (default: %(default)s)")
    parser.add_argument("--name", default=name,
                        help="outputs go to OUT/NAME/ (default: %(default)s)")
    parser.add_argument("--out", default="runs", help="default: %(default)s")
    parser.add_argument("--resume", action="store_true",
                        help="continue from runs/<name>/checkpoint.npz for --epochs more epochs")
    parser.add_argument("--quiet", action="store_true", help="print only the final results")
    return parser


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    if args.learning_rate is None:
        args.learning_rate = 0.003 if args.optimizer == "adam" else 0.05
    return args


def parse(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = training_parser(__doc__, epochs=15, name="digits", prog=prog)
    parser.add_argument("--no-plots", action="store_true",
                        help="write no loss.png or graph.svg")
    parser.add_argument("--train-size", type=int, default=None, metavar="N",
                        help="train on the first N training images only (a quick smoke run)")
    parser.add_argument("--predict", metavar="RUN_DIR",
                        help="only reload RUN_DIR's model and print its test accuracy")
    return finish_args(parser.parse_args(argv))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse(argv, prog)
    if args.predict:
        print(f"reloaded model test accuracy: {predict(args.predict, args.seed):.4f}")
        return 0
    result = train(args)
    print(f"final test accuracy: {result['test_accuracy']:.4f} "
          f"({result['seconds']:.1f} s, outputs in {result['run_dir']}/)")
    reloaded = subprocess.run(
        [sys.executable, "-m", "minigraph.examples.train_digits_cnn", "--predict",
         result["run_dir"], "--seed", str(args.seed)], capture_output=True, text=True)
    print(reloaded.stdout.strip() or reloaded.stderr.strip())
    return 0 if reloaded.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
