"""Data-parallel training across processes on torch.distributed (docs/distributed.md).

Every process runs the same network on its shard of the batch; between the backward pass and the
optimizer the gradients are averaged across the processes, so that every rank takes the same step
and the weights stay identical. The transport is torch.distributed (gloo on CPU and macOS, or any
backend the user initializes); mpsgrad adds no network code.

* `all_reduce_gradients(states)` averages the gradients held by gradient states (convolution /
  fully connected weight and bias gradients, batch / instance / group normalization gamma and beta
  gradients, PReLU slopes) in place: NumPy views onto the states' storage are handed to torch
  without a copy (`torch.from_numpy`), packed into a few flat buckets (one collective per bucket,
  not per tensor) and written back.
* `DataParallel(graph)` installs it as the graph's `before_updates` hook, which the graph calls
  once a step's command buffer has run and before any data source updates (docs/graph.md).
* `broadcast_arrays(arrays)` copies rank 0's initial weights to every rank; `shard(indices)`
  gives a rank its slice of a batch.
* `sync_batch_norm_statistics` / `sync_batch_norm_gradients`: synchronized batch normalization
  (torch.nn.SyncBatchNorm's semantics) for hand-written kernel loops, and inside a graph with
  `DataParallel(graph, sync_batch_norm=True)` (the graph's `batch_normalization_sync` host points).

PyTorch is an optional dependency of mpsgrad: `import mpsgrad` never imports it; this module does.
"""
from __future__ import annotations

import datetime
import hashlib
import math
import numbers
import os
from typing import Iterable, List, Optional, Sequence

import numpy as np

try:
    import torch
    import torch.distributed as dist
except ImportError as error:  # pragma: no cover - exercised by a subprocess test without torch
    raise ImportError("mpsgrad.distributed needs PyTorch (torch.distributed): install it with "
                      "`pip install torch` or `pip install 'mpsgrad[distributed]'`") from error

import mpsgrad as _m

__all__ = ["init_process_group", "rank", "world_size", "gradient_arrays", "all_reduce_gradients",
           "all_reduce_arrays", "broadcast_arrays", "shard", "DataParallel", "sync_batch_norm_statistics", "sync_batch_norm_gradients",
           "checksum", "DEFAULT_BUCKET_BYTES"]

# Flat buckets of at most this many bytes (PyTorch DDP's default bucket size is 25 MiB).
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def init_process_group(backend: str = "gloo", timeout_seconds: float = 60.0, **kwargs) -> None:
    """torch.distributed.init_process_group from torchrun's environment (MASTER_ADDR, MASTER_PORT,
    RANK, WORLD_SIZE) with a timeout: a collective that waits longer for a peer (a rank that died
    or took another path) raises instead of hanging."""
    if not isinstance(backend, str):
        raise TypeError(f"backend: expected a str such as 'gloo', got {type(backend).__name__}")
    _check_positive_number(timeout_seconds, "timeout_seconds")
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        if name not in os.environ and "init_method" not in kwargs:
            raise ValueError(f"init_process_group: environment variable {name} is not set; run under torchrun "
                             f"(torchrun --standalone --nproc_per_node N script.py) or pass init_method")
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds), **kwargs)


# ---- argument checks: every public function checks its arguments first, so a wrong argument is a
# TypeError / ValueError naming it even before torch.distributed is initialized --------------------

def _type_name(value) -> str:
    return "None" if value is None else type(value).__name__


def _check_group(group) -> None:
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group: expected None or a torch.distributed.ProcessGroup, got {_type_name(group)}")


def _check_int(value, name: str, minimum: int) -> int:
    """An int (not a bool, not a float) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {_type_name(value)}")
    if int(value) < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def _check_positive_number(value, name: str) -> float:
    """A real number (not a bool), finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a positive number, got {_type_name(value)}")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return float(value)


def _as_list(values, name: str, expected: str) -> list:
    """The items of a list / tuple / other iterable. A lone array, a string or a non-iterable (None,
    one state, an Image) is a TypeError: iterating it would silently mean something else."""
    if values is None or isinstance(values, (str, bytes, np.ndarray)) or not isinstance(values, Iterable):
        raise TypeError(f"{name}: expected a list of {expected}, got {_type_name(values)}")
    return list(values)


def _require_group(group):
    _check_group(group)
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("mpsgrad.distributed: torch.distributed is not initialized; call "
                           "mpsgrad.distributed.init_process_group() (or torch.distributed.init_process_group) first")
    return group


def rank(group=None) -> int:
    """This process's rank (0 when torch.distributed is not initialized)."""
    _check_group(group)
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def world_size(group=None) -> int:
    """The number of processes (1 when torch.distributed is not initialized)."""
    _check_group(group)
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


# ---- the gradients a state holds ---------------------------------------------------------------------------

def gradient_arrays(state) -> List[np.ndarray]:
    """Writable float32 NumPy views of the gradients `state` holds (no copy): a
    CNNConvolutionGradientState's weight and bias gradients, a batch / instance / group
    normalization state's gamma and beta gradients, a PReLU CNNNeuronGradientState's slope
    gradient. TypeError for any other object."""
    if isinstance(state, _m.CNNConvolutionGradientState):
        arrays = [state.gradient_for_weights, state.gradient_for_biases]
    elif isinstance(state, (_m.CNNBatchNormalizationState, _m.CNNInstanceNormalizationGradientState,
                            _m.CNNGroupNormalizationGradientState)):
        arrays = [state.gradient_for_gamma, state.gradient_for_beta]
    elif isinstance(state, _m.CNNNeuronGradientState):
        arrays = [state.gradient_for_data]
    else:
        raise TypeError("states: expected CNNConvolutionGradientState, CNNBatchNormalizationState, "
                        "CNNInstanceNormalizationGradientState, CNNGroupNormalizationGradientState or "
                        f"CNNNeuronGradientState objects, got {type(state).__name__}")
    return [a for a in arrays if a is not None]


def _float32_views(arrays: Iterable, what: str) -> List[np.ndarray]:
    views = []
    for i, a in enumerate(_as_list(arrays, what, "float32 numpy.ndarray objects")):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            raise TypeError(f"{what}[{i}]: expected a float32 numpy.ndarray, got "
                            f"{getattr(a, 'dtype', type(a).__name__)}")
        if not a.flags.writeable:
            raise ValueError(f"{what}[{i}]: the array is read-only; it must be a writable view of the storage")
        views.append(a)
    return views


def _buckets(arrays: Sequence[np.ndarray], bucket_bytes: int) -> List[List[int]]:
    """Consecutive arrays grouped so that each group holds at most bucket_bytes (an array larger
    than that is a bucket of its own)."""
    groups, current, size = [], [], 0
    for i, a in enumerate(arrays):
        if current and size + a.nbytes > bucket_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += a.nbytes
    if current:
        groups.append(current)
    return groups


def _collective(what: str, fn, *args, **kwargs):
    """Runs a torch.distributed collective; a failure (a peer that died, a timeout) becomes a
    RuntimeError saying which step of mpsgrad.distributed failed on which rank."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as error:
        raise RuntimeError(f"mpsgrad.distributed: {what} failed on rank {rank()} (a rank died, timed out, or the "
                           f"ranks disagree on what to exchange): {error}") from error


def _check_same_layout(shapes: Sequence[tuple], what: str, group, weight: float = 0.0) -> float:
    """ValueError on every rank unless every rank exchanges arrays of the same shapes; returns the
    sum of `weight` over the ranks. One SUM all-reduce of five float64 values: two 20-bit hashes h
    of the shapes and their squares (sum(h)^2 == ranks * sum(h^2) exactly when every rank's h is
    the same; exact in float64 up to 8192 ranks) and the weight. The shapes are gathered only on a
    mismatch, to name them."""
    digest = hashlib.sha256(repr([tuple(s) for s in shapes]).encode()).digest()
    hashes = [int.from_bytes(digest[i:i + 3], "little") & 0xFFFFF for i in (0, 3)]
    values = torch.tensor([hashes[0], hashes[0] ** 2, hashes[1], hashes[1] ** 2, weight], dtype=torch.float64)
    _collective(f"{what} (layout check)", dist.all_reduce, values, group=group)
    sums = [int(v) for v in values[:4].tolist()]
    ranks = world_size(group)
    if sums[0] ** 2 == ranks * sums[1] and sums[2] ** 2 == ranks * sums[3]:
        return float(values[4])
    gathered = [None] * ranks
    _collective(f"{what} (layout report)", dist.all_gather_object, gathered, [tuple(s) for s in shapes], group=group)
    lines = [f"rank {r}: {len(s)} arrays {s}" for r, s in enumerate(gathered)]
    raise ValueError(f"{what}: the ranks' gradient layouts differ (every rank must run the same graph with the same "
                     f"shapes):\n  " + "\n  ".join(lines))


def _reduce_arrays(views: List[np.ndarray], what: str, group, bucket_bytes: int, op, scale: float) -> int:
    """All-reduces `views` in place with `op` in flat buckets, then multiplies by `scale`.
    Returns the number of collectives issued for the data."""
    groups = _buckets(views, bucket_bytes)
    for indices in groups:
        tensors = [torch.from_numpy(views[i]).reshape(-1) for i in indices]  # no copy for contiguous views
        # One contiguous array: reduced in place in the state's storage. Else packed into one bucket.
        in_place = len(indices) == 1 and views[indices[0]].flags.c_contiguous
        flat = tensors[0] if in_place else torch.cat(tensors)
        _collective(what, dist.all_reduce, flat, op=op, group=group)
        if scale != 1.0:
            flat.mul_(scale)
        if not in_place:
            offset = 0
            for i in indices:
                size = views[i].size
                views[i][...] = flat[offset:offset + size].numpy().reshape(views[i].shape)
                offset += size
    return len(groups)


def all_reduce_gradients(states: Iterable, weight: Optional[float] = None, group=None,
                         bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> int:
    """Averages, in place and across the ranks of `group`, the gradients the gradient states hold
    (see gradient_arrays; the same state listed twice counts once).

    With weight None every rank counts the same (the mean over ranks: the full-batch gradient when
    every rank's loss is a mean over equally large shards). With a weight (e.g. the rank's number
    of samples) the result is sum(weight_r * g_r) / sum(weight_r), the full-batch gradient for
    unequal shards. Raises ValueError when the ranks' layouts differ, RuntimeError when a
    collective fails (a rank died or the process group's timeout passed). Returns the number of
    data collectives issued (the buckets)."""
    _check_group(group)
    _check_int(bucket_bytes, "bucket_bytes", 1)
    unique, seen = [], set()
    for state in _as_list(states, "states", "gradient states"):
        if id(state) not in seen:
            seen.add(id(state))
            unique.append(state)
    views = [a for state in unique for a in gradient_arrays(state)]
    if weight is not None:
        weight = _check_positive_number(weight, "weight")
    _require_group(group)
    total = _check_same_layout([a.shape for a in views], "all_reduce_gradients", group,
                               1.0 if weight is None else weight)
    if weight is not None:
        for a in views:
            a *= np.float32(weight)
    return _reduce_arrays(views, "all_reduce_gradients", group, bucket_bytes, dist.ReduceOp.SUM, 1.0 / total)


def all_reduce_arrays(arrays: Iterable[np.ndarray], group=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
    """Replaces, in place, every rank's float32 arrays by their mean over the ranks (bucketed), e.g.
    batch normalization's running mean and variance, which each rank accumulates from its own
    shard. ValueError when the ranks' shapes differ."""
    _check_group(group)
    _check_int(bucket_bytes, "bucket_bytes", 1)
    views = _float32_views(arrays, "arrays")
    _require_group(group)
    _check_same_layout([a.shape for a in views], "all_reduce_arrays", group)
    _reduce_arrays(views, "all_reduce_arrays", group, bucket_bytes, dist.ReduceOp.SUM, 1.0 / world_size(group))


def broadcast_arrays(arrays: Iterable[np.ndarray], src: int = 0, group=None,
                     bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
    """Overwrites, in place, every rank's float32 arrays with rank `src`'s (the initial weights:
    writable views such as a CNNConvolutionWeightsAndBiasesState's weights and biases, or the
    arrays a data source returns). Reload the kernels afterwards (graph.reload_from_data_sources()
    or build the graph after the broadcast). ValueError when the ranks' shapes differ."""
    _check_group(group)
    src = _check_int(src, "src", 0)
    _check_int(bucket_bytes, "bucket_bytes", 1)
    views = _float32_views(arrays, "arrays")
    _require_group(group)
    if src >= world_size(group):
        raise ValueError(f"src: expected a rank in [0, {world_size(group)}), got {src}")
    _check_same_layout([a.shape for a in views], "broadcast_arrays", group)
    for indices in _buckets(views, bucket_bytes):
        contiguous = [np.ascontiguousarray(views[i]) for i in indices]
        tensors = [torch.from_numpy(a).reshape(-1) for a in contiguous]
        flat = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        _collective("broadcast_arrays", dist.broadcast, flat, src=src, group=group)
        offset = 0
        for i, t in zip(indices, tensors):
            views[i][...] = flat[offset:offset + t.numel()].numpy().reshape(views[i].shape)
            offset += t.numel()


def shard(indices, rank_: Optional[int] = None, world_size_: Optional[int] = None) -> np.ndarray:
    """This rank's contiguous slice of `indices` (a batch's sample indices): the slices of all ranks
    partition it, their sizes differ by at most one (pass the size as all_reduce_gradients' weight
    when they differ)."""
    if indices is None:
        raise TypeError("indices: expected a sequence of sample indices, got None")
    indices = np.asarray(indices)
    if indices.ndim == 0:
        raise ValueError(f"indices: expected a sequence of sample indices, got a scalar {indices.item()!r}")
    r = rank() if rank_ is None else _check_int(rank_, "rank_", 0)
    n = world_size() if world_size_ is None else _check_int(world_size_, "world_size_", 1)
    if n < 1 or not 0 <= r < n:
        raise ValueError(f"rank: expected 0 <= rank < world_size, got rank {r}, world_size {n}")
    return np.array_split(indices, n)[r]


def checksum(arrays: Iterable[np.ndarray]) -> str:
    """A hex digest of the arrays' bytes (SHA-256, first 16 hex digits): equal on every rank
    exactly when the weights are bitwise identical."""
    h = hashlib.sha256()
    for i, a in enumerate(_as_list(arrays, "arrays", "numpy.ndarray objects")):
        if not isinstance(a, np.ndarray):  # anything else would hash its object's bytes, not its values
            raise TypeError(f"arrays[{i}]: expected a numpy.ndarray, got {_type_name(a)}")
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class DataParallel:
    """Averages a training graph's gradients across ranks on every encode.

    Sets graph.before_updates: once a step's command buffer has run, the gradient states of every
    trainable node are all-reduced (all_reduce_gradients) before any data source updates, so every
    rank applies the same step. The trainable nodes must train UPDATE_DEVICE_CPU. The hook runs in
    the command buffer's completion; call check() after wait_until_completed() to raise the
    error a failed exchange left (a rank that died, a timeout, different layouts).

    sync_batch_norm=True also sets graph.batch_normalization_sync: every batch normalization node
    that computes batch statistics then normalizes with the statistics of all ranks' values
    together, and its gradient node uses the ranks' summed dγ and dβ (torch.nn.SyncBatchNorm's
    forward and backward; sync_batch_norm_statistics / sync_batch_norm_gradients at host points of
    the command buffer). A failed exchange there fails the command buffer: wait_until_completed()
    raises CommandBufferError naming it."""

    def __init__(self, graph, group=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, sync_batch_norm: bool = False):
        if not isinstance(graph, _m.NNGraph):
            raise TypeError(f"graph: expected an NNGraph, got {type(graph).__name__}")
        if not isinstance(sync_batch_norm, bool):
            raise TypeError(f"sync_batch_norm: expected a bool, got {type(sync_batch_norm).__name__}")
        _check_int(bucket_bytes, "bucket_bytes", 1)
        _require_group(group)
        self.graph, self.group, self.bucket_bytes = graph, group, bucket_bytes
        self.weight: Optional[float] = None  # set per step for unequal shards
        self.error: Optional[BaseException] = None
        self.collectives = 0  # data collectives issued so far
        self.seconds = 0.0  # time spent in the gradient exchange so far
        self.sync_seconds = 0.0  # time spent synchronizing batch normalization so far
        graph.before_updates = self._before_updates
        if sync_batch_norm:
            graph.batch_normalization_sync = self._sync_batch_norm

    def _sync_batch_norm(self, state, stage: str, count: int) -> None:
        import time

        start = time.perf_counter()
        try:
            if stage == "statistics":
                sync_batch_norm_statistics(state, count, self.group)
            else:
                sync_batch_norm_gradients(state, count, self.group)
        except BaseException as error:  # also fails the command buffer; recorded for check()
            self.error = error
            raise
        finally:
            self.sync_seconds += time.perf_counter() - start

    def _before_updates(self, states) -> None:
        import time

        start = time.perf_counter()
        try:
            self.collectives += all_reduce_gradients(states, self.weight, self.group, self.bucket_bytes)
        except BaseException as error:  # recorded for check(): a completion handler cannot raise to the caller
            self.error = error
            raise
        finally:
            self.seconds += time.perf_counter() - start

    def check(self) -> None:
        """Raises (once) the error the last exchange recorded."""
        error, self.error = self.error, None
        if error is not None:
            raise error

    def detach(self) -> None:
        self.graph.before_updates = None
        self.graph.batch_normalization_sync = None


# ---- synchronized batch normalization (hand-written kernel loops) ------------------------------------------

def _check_batch_normalization_state(state):
    if not isinstance(state, _m.CNNBatchNormalizationState):
        raise TypeError(f"state: expected a CNNBatchNormalizationState, got {type(state).__name__}")
    return state


def sync_batch_norm_statistics(state, count: int, group=None) -> int:
    """Replaces the batch mean and (biased) variance in `state` (written by
    CNNBatchNormalizationStatistics over this rank's `count` values per channel: images x height x
    width) by those of all ranks' values together, as torch.nn.SyncBatchNorm does: each rank's
    statistics weighted by its count, in float64. Encode CNNBatchNormalization with the state
    afterwards (a new command buffer). Returns the total count (for the running variance's
    unbiasing)."""
    _check_group(group)
    _check_batch_normalization_state(state)
    count = _check_int(count, "count", 1)
    mean, variance = state.mean, state.variance
    if mean is None or variance is None:
        raise ValueError("state: has no batch statistics yet; encode CNNBatchNormalizationStatistics first")
    _require_group(group)
    n = float(count)
    mu = mean.astype(np.float64)
    sums = torch.from_numpy(np.concatenate([[n], n * mu, n * (variance.astype(np.float64) + mu * mu)]))
    _check_same_layout([mean.shape], "sync_batch_norm_statistics", group)
    _collective("sync_batch_norm_statistics", dist.all_reduce, sums, group=group)
    total = float(sums[0])
    channels = mean.size
    global_mean = sums[1:1 + channels].numpy() / total
    global_variance = np.maximum(sums[1 + channels:].numpy() / total - global_mean ** 2, 0.0)
    mean[...] = global_mean.astype(np.float32)
    variance[...] = global_variance.astype(np.float32)
    return int(round(total))


def sync_batch_norm_gradients(state, count: int, group=None) -> None:
    """After CNNBatchNormalizationStatisticsGradient (dγ = Σ G'·x̂ and dβ = Σ G' over this rank's
    `count` values per channel), makes CNNBatchNormalizationGradient compute the input gradient of
    synchronized batch normalization: it divides the state's sums by the local count, so the sums
    of all ranks are stored scaled by count / total count (torch.nn.SyncBatchNorm's backward). With
    equally large shards the stored values are then the mean over ranks of the local dγ and dβ,
    what data-parallel training applies to gamma and beta (all_reduce_gradients leaves them as they
    are)."""
    _check_group(group)
    _check_batch_normalization_state(state)
    count = _check_int(count, "count", 1)
    d_gamma, d_beta = state.gradient_for_gamma, state.gradient_for_beta
    if d_gamma is None or d_beta is None:
        raise ValueError("state: has no gamma/beta gradients yet; encode CNNBatchNormalizationStatisticsGradient "
                         "first")
    _require_group(group)
    sums = torch.from_numpy(np.concatenate([[float(count)], d_gamma.astype(np.float64), d_beta.astype(np.float64)]))
    _check_same_layout([d_gamma.shape], "sync_batch_norm_gradients", group)
    _collective("sync_batch_norm_gradients", dist.all_reduce, sums, group=group)
    scale = float(count) / float(sums[0])
    channels = d_gamma.size
    d_gamma[...] = (sums[1:1 + channels].numpy() * scale).astype(np.float32)
    d_beta[...] = (sums[1 + channels:].numpy() * scale).astype(np.float32)
