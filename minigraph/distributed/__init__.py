"""Data-parallel training over MPI, with synchronized (cross-replica) batch norm.

One process per replica, started by an MPI launcher (``mpiexec -n 4 python train.py``); each
builds the same graph and feeds its shard of every global batch. See ``docs/distributed.md``.

* :func:`rank`, :func:`size`, :func:`is_chief`: where this process stands (rank 0 of 1
  without MPI: everything below then works on one process, the collectives being identities).
* :class:`CollectiveAllReduce`: the graph op summing (``merge_op="Add"``) or averaging
  (``"Mean"``) a tensor over the replicas inside ``ClientSession.Run``; differentiable.
* :class:`DataParallel`: wraps an optimizer; one fused all-reduce of all gradients per step.
* :func:`initialize` / :func:`broadcast_variables`: rank 0's initial values everywhere.
* :class:`Saver`: checkpoints written by rank 0 only (atomically), restored by broadcast.
* :func:`sync_batch_norm`, :class:`SyncBatchNorm`, :func:`convert_sync_batch_norm`: batch
  norm whose training statistics are those of the global batch (Chan's exact combination of
  per-replica count/mean/M2; the backward all-reduces sum(dy) and sum(dy (x - mean))).
* Failures: every collective times out after ``$MINIGRAPH_COLLECTIVE_TIMEOUT`` seconds
  (default 60) with :class:`minigraph.errors.UnavailableError` naming the collective, the
  rank and the timeout; an uncaught exception on any rank aborts the whole job (MPI_Abort).

mpi4py (the ``minigraph[mpi]`` extra) is imported lazily, on the first use of the runtime.
Importing this package registers its ops and kernels (also needed to load a saved graph
that contains them).
"""

from minigraph.distributed import kernels as _kernels  # noqa: F401  (registers the kernels)
from minigraph.distributed.kernels import combine_moments, local_moments
from minigraph.distributed.layers import SyncBatchNorm, convert_sync_batch_norm, sync_batch_norm
from minigraph.distributed.ops import (
    BatchNormApply,
    BatchNormGradApply,
    BatchNormLocalGradSums,
    BatchNormLocalStats,
    CollectiveAllReduce,
    CollectiveBatchNormStats,
    FlatConcat,
    FlatSlice,
)
from minigraph.distributed.runtime import (
    DEFAULT_TIMEOUT,
    ENV_TIMEOUT,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    init,
    install_excepthook,
    is_chief,
    rank,
    size,
    timeout,
)
from minigraph.distributed.training import (
    DataParallel,
    Saver,
    broadcast_variables,
    fused_all_reduce,
    initialize,
)

__all__ = [
    "BatchNormApply", "BatchNormGradApply", "BatchNormLocalGradSums", "BatchNormLocalStats",
    "CollectiveAllReduce", "CollectiveBatchNormStats", "DEFAULT_TIMEOUT", "DataParallel",
    "ENV_TIMEOUT", "FlatConcat", "FlatSlice", "Saver", "SyncBatchNorm", "all_gather",
    "all_reduce", "barrier", "broadcast", "broadcast_variables", "combine_moments",
    "convert_sync_batch_norm", "fused_all_reduce", "init", "initialize", "install_excepthook",
    "is_chief", "local_moments", "rank", "size", "sync_batch_norm", "timeout",
]
