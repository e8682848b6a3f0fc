"""Train the digits CNN: see minigraph/examples/train_digits_cnn.py (`python -m minigraph demo`)."""

from minigraph.examples.train_digits_cnn import main

if __name__ == "__main__":
    raise SystemExit(main())
