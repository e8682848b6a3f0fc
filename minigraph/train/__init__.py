"""Training helpers: variables with initializers, optimizers, and checkpoints."""

from minigraph.train.checkpoint import Saver
from minigraph.train.optimizers import Adam, GradientDescent, Momentum, Optimizer
from minigraph.train.variables import global_variables_initializer, variable

__all__ = ["Adam", "GradientDescent", "Momentum", "Optimizer", "Saver",
           "global_variables_initializer", "variable"]
