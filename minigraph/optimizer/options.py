"""``OptimizerOptions``: which graph passes a session runs before it plans a run.

TensorFlow switches grappler's passes in ``ConfigProto.graph_options.rewrite_options``;
minigraph's counterpart is a small frozen dataclass given to ``ClientSession`` (and to
``mg.optimize``). Each field switches the pass of that name in ``minigraph/optimizer/``.
Every pass that is on by default leaves results bit for bit unchanged, so turning one off
is for inspecting and testing (compare an optimized plan with the plain one), never for
correctness; ``$MINIGRAPH_OPTIMIZER=off`` turns them all off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

from minigraph.framework.errors import InvalidArgumentError

OPTIMIZER_VAR = "MINIGRAPH_OPTIMIZER"  # "off": every rewrite off (the default is "on")


@dataclass(frozen=True)
class OptimizerOptions:
    """The graph passes, in the order they run (``minigraph/optimizer/``):

    * ``pruning``: keep only what the fetches and targets need;
    * ``identity_removal``: drop Identity/IdentityN/Snapshot/StopGradient and NoOp relays;
    * ``common_subexpression``: merge nodes of the same op, attrs and inputs (never a
      stateful one);
    * ``constant_folding``: replace integer/shape subgraphs whose value is known before a
      step runs (``Shape``/``ShapeN``/``Size``/``Rank`` of static shapes,
      ``BroadcastGradientArgs``, reduction indices) by small constants;
    * ``layout``: run an NCHW graph's convolutions, pools and bias adds in NHWC, with
      transposes only at its boundaries (``optimizer/layout.py``);
    * ``remapper``: fuse a convolution's or matmul's elementwise successors into one op
      (``BiasAdd -> FusedBatchNormV3 (inference) -> AddV2 -> Relu/Relu6``, see
      ``optimizer/remapper.py``) and a constant ``Pad`` into its convolution; in training,
      ``FusedBatchNormV3 -> [AddV2] -> Relu`` and its gradient into ``_FusedBatchNormEx`` /
      ``_FusedBatchNormGradEx``, ``Relu -> MaxPool`` and ``MaxPoolGrad -> ReluGrad``, and a
      step's variable updates into one op (``optimizer/training_fusions.py``);
    * ``fold_batch_norm`` (off by default: it changes rounding): fold an inference batch
      norm with constant statistics into its ``Conv2D``'s constant filter and a ``BiasAdd``
      (``optimizer/batch_norm_folding.py``);
    * ``memory_planner`` (not a graph pass: the plan's memory, ``client/planner.py``): drop
      each intermediate after its last reader, let kernels write into inputs that die
      there, join a concat's inputs in place, and run steady-state steps bound to their
      feed signature;
    * ``elementwise_groups`` (not a graph pass either: a bound plan's steps, see
      ``client/elementwise_groups.py``): run each group of native float32 elementwise steps
      that feed each other (activations, their gradients, binary arithmetic, a channels-last
      bias add) as one pass over their inputs, bit for bit the steps' values; needs
      ``memory_planner``;
    * ``replay`` (a bound plan's run, see ``client/replay.py``): once a plan runs bound,
      replay its program over buffers of its own, each kernel's C call made with arguments
      made once, bit for bit the bound run's values: a loop's body (steps whose inputs do
      not change run once per loop) and a session's run of a small program (at most
      ``replay.MAX_BYTES`` of values); needs ``memory_planner``.
    """

    pruning: bool = True
    identity_removal: bool = True
    common_subexpression: bool = True
    constant_folding: bool = True
    layout: bool = True
    remapper: bool = True
    fold_batch_norm: bool = False
    memory_planner: bool = True
    elementwise_groups: bool = True
    replay: bool = True

    def __post_init__(self) -> None:
        for item in fields(self):
            if not isinstance(getattr(self, item.name), bool):
                raise InvalidArgumentError(
                    f"OptimizerOptions: {item.name} must be True or False, got "
                    f"{getattr(self, item.name)!r}")

    @property
    def any_on(self) -> bool:
        return any(getattr(self, item.name) for item in fields(self))

    def enabled(self, name: str) -> bool:
        """Whether the pass ``name`` is on (a pass without a field is off)."""
        return bool(getattr(self, name, False))

    @classmethod
    def all_off(cls) -> OptimizerOptions:
        return replace(cls(), **{item.name: False for item in fields(cls)})

    @classmethod
    def from_environment(cls) -> OptimizerOptions:
        """The default: every pass on, or off when ``$MINIGRAPH_OPTIMIZER`` is ``off``."""
        value = os.environ.get(OPTIMIZER_VAR, "on").strip().lower()
        if value not in ("on", "off"):
            raise InvalidArgumentError(f"${OPTIMIZER_VAR} must be 'on' or 'off', got "
                                       f"{value!r}")
        return cls() if value == "on" else cls.all_off()
