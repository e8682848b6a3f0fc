"""The batch-norm gradients tour: see minigraph/examples/bn_gradients_tour.py."""

from minigraph.examples.bn_gradients_tour import main

if __name__ == "__main__":
    raise SystemExit(main())
