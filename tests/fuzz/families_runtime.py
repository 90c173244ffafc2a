"""Fuzz families of the runtime: host callbacks and completed handlers (docs/metal.md "Host points",
docs/verification.md "Command buffers"), command-buffer misuse, the CPU backend's thread and buffer
cache settings (docs/performance.md), and mpsgrad.distributed in a one-process gloo group
(docs/distributed.md).
"""
from __future__ import annotations

import os
import random
import socket

import numpy as np

from fuzz_support import (WORKER_SETUP, WRONG_TYPES, Context, InvalidAccepted, WrongResult, check_close, family,
                          random_array, run)


# ---------------------------------------------------------------------------------------------
# host callbacks: order, a raising callback, a callback or handler that waits on its own buffer


def _relu_work(r: random.Random, ctx: Context, cb):
    m = ctx.m
    x_arr = random_array(r, 2, 3, 4)
    y = m.CNNNeuronReLU(ctx.device).encode(cb, m.Image.from_numpy(x_arr, ctx.device))  # persistent (Context.m)
    return y, np.maximum(x_arr, 0)


@family("host_callbacks")
def host_callback_ops(r: random.Random, ctx: Context):
    m = ctx.m
    action = r.choice(["order", "raises", "waits_own", "handler_waits_own", "handler_raises", "not_callable",
                       "reads_result"])
    cb = ctx.queue.command_buffer()
    seen = []
    ctx.start_call()
    if action == "not_callable":
        ctx.rejects("encode_host_callback(non-callable)", cb.encode_host_callback, r.choice(WRONG_TYPES[:2] + [3]))
        return
    if action == "waits_own" and not ctx.reach(r, "runtime.callback_waits", 1.0):
        return
    y, expected = _relu_work(r, ctx, cb)
    if action == "order":
        for i in range(r.randint(1, 4)):
            cb.encode_host_callback(lambda i=i: seen.append(i))
        cb.add_completed_handler(lambda done: seen.append("done"))
    elif action == "raises":
        cb.encode_host_callback(lambda: 1 / 0)
    elif action == "waits_own":  # documented as misuse: it must fail the buffer, never deadlock
        cb.encode_host_callback(lambda: cb.wait_until_completed())
    elif action == "handler_waits_own":
        def handler(done):
            try:
                done.wait_until_completed()
                seen.append("returned")
            except m.CommandBufferError:
                seen.append("refused")
        cb.add_completed_handler(handler)
    elif action == "handler_raises":
        cb.add_completed_handler(lambda done: 1 / 0)
    else:
        cb.encode_host_callback(lambda: seen.append(y.to_numpy().copy()))
    cb.commit()
    failed = False
    try:
        cb.wait_until_completed()
    except m.CommandBufferError:
        failed = True
    _check_callback_outcome(ctx, action, cb, failed, seen, y, expected)


def _check_callback_outcome(ctx, action, cb, failed, seen, y, expected):
    m = ctx.m
    if action in ("raises", "waits_own"):
        if not failed or cb.status != m.CommandBufferStatus.ERROR or "host callback failed" not in str(cb.error):
            raise WrongResult(f"host callback ({action}): status {cb.status}, error {cb.error!r}; documented: "
                              "ERROR, 'host callback failed', CommandBufferError at the wait")
        return
    if failed:
        raise WrongResult(f"host callback ({action}): the buffer failed: {cb.error}")
    m.synchronize()  # completed handlers have run
    if action == "order" and seen != list(range(len(seen) - 1)) + ["done"]:
        raise WrongResult(f"host callbacks ran out of order: {seen}")
    if action == "handler_waits_own" and seen not in (["returned"], ["refused"]):
        raise WrongResult(f"completed handler waiting on its own buffer: {seen}")
    if action == "reads_result":
        check_close(seen[0][0], expected, "a host callback sees the work encoded before it")
    check_close(y.to_numpy()[0], expected, f"ReLU beside host callbacks ({action})")


# ---------------------------------------------------------------------------------------------
# command-buffer misuse: encode into a committed buffer, handlers after commit, a failed buffer's
# results, temporary images across buffers; the queue keeps working afterwards


@family("command_buffer_misuse")
def command_buffer_misuse_ops(r: random.Random, ctx: Context):
    m = ctx.m
    action = r.choice(["encode_after_commit", "handler_after_commit", "wait_twice", "fail_then_reuse_queue",
                       "commit_twice", "wait_uncommitted"])
    cb = ctx.queue.command_buffer()
    ctx.start_call()
    if action == "encode_after_commit":
        cb.commit()
        x = m.Image.from_numpy(random_array(r, 2, 2, 4), ctx.device)
        ctx.rejects("encode into a committed command buffer", m.CNNNeuronReLU(ctx.device).encode, cb, x)
    elif action == "handler_after_commit":
        cb.commit()
        cb.wait_until_completed()
        ctx.rejects("add_completed_handler after completion", cb.add_completed_handler, lambda done: None)
    elif action == "wait_twice":
        cb.commit()
        cb.wait_until_completed()
        cb.wait_until_completed()  # Metal: waiting on a completed buffer returns at once
    elif action == "commit_twice":
        cb.commit()
        ctx.rejects("commit twice", cb.commit)
    elif action == "wait_uncommitted":
        ctx.rejects("wait_until_completed before commit", cb.wait_until_completed)
    else:
        cb.fail_on_commit("fuzz")
        _relu_work(r, ctx, cb)
        cb.commit()
        ctx.rejects("wait on a failed buffer", cb.wait_until_completed)
    # whatever happened, the queue still runs new work correctly
    cb2 = ctx.queue.command_buffer()
    y, expected = _relu_work(r, ctx, cb2)
    run(ctx, cb2)
    check_close(y.to_numpy()[0], expected, f"the queue after {action}")


# ---------------------------------------------------------------------------------------------
# set_num_threads / buffer cache (docs/performance.md): ValueError unless n >= 1, TypeError unless an int


@family("threads_and_cache")
def threads_and_cache_ops(r: random.Random, ctx: Context):
    m = ctx.m
    before = m.get_num_threads()
    ctx.start_call()
    n = ctx.bad(r, r.randint(1, 3), [0, -1, 2**31, 2**63, 2**64, 1.5, "2", None], p=0.4, what="n")
    if n in (2**31, 2**63, 2**64):
        ctx.invalid.pop()  # a huge count is not documented as invalid: it must be refused or work
    try:
        m.set_num_threads(n)
    except (ValueError, TypeError, MemoryError):
        if m.get_num_threads() != before:
            raise WrongResult("a refused set_num_threads changed the thread count")
        ctx.invalid = []
        return
    finally:
        if r.random() < 0.3:
            m.release_cached_buffers()
    ctx.expect_rejected_if_invalid("set_num_threads")
    try:
        cb = ctx.queue.command_buffer()
        y, expected = _relu_work(r, ctx, cb)
        run(ctx, cb)
        check_close(y.to_numpy()[0], expected, f"ReLU on {n} threads")
    finally:
        m.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# mpsgrad.distributed in a one-process gloo group: averages of one rank are the identity


def _import_distributed():
    try:
        import mpsgrad.distributed  # noqa: F401 - imports torch (seconds): done before the first case
    except ImportError:  # no torch: the distributed family does nothing
        pass


WORKER_SETUP.append(_import_distributed)


def _distributed():
    import torch.distributed as dist

    import mpsgrad.distributed as mdist
    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
        mdist.init_process_group("gloo", timeout_seconds=30)
    return mdist


@family("distributed")
def distributed_ops(r: random.Random, ctx: Context):
    try:
        mdist = _distributed()
    except ImportError:
        return
    arrays = [random_array(r, r.randint(1, 40)) for _ in range(r.randint(1, 4))]
    copies = [a.copy() for a in arrays]
    action = r.choice(["all_reduce", "broadcast", "shard", "checksum", "bad"])
    ctx.start_call()
    if action == "all_reduce":
        mdist.all_reduce_arrays(arrays, bucket_bytes=r.choice([4, 64, 2**20]))
    elif action == "broadcast":
        mdist.broadcast_arrays(arrays, src=0)
    elif action == "shard":
        n = r.randint(0, 20)
        got = mdist.shard(np.arange(n))
        if not np.array_equal(got, np.arange(n)):
            raise WrongResult(f"shard of one rank: {got} for {n} indices")
    elif action == "checksum":
        if mdist.checksum(arrays) != mdist.checksum(copies):
            raise WrongResult("checksum differs for equal arrays")
    elif ctx.reach(r, "distributed.bad_arguments", 1.0):
        _distributed_bad_call(r, ctx, mdist, arrays)
    for a, c in zip(arrays, copies):
        check_close(a, c, f"distributed {action} on one rank leaves the arrays unchanged", tol=1e-6)


def _distributed_bad_call(r, ctx, mdist, arrays):
    """Wrong arguments must raise ValueError or TypeError naming the parameter (docs/distributed.md)."""
    m = ctx.m
    calls = [
        # (bucket_bytes <= 0: only all_reduce_gradients documents it as invalid, so it is not drawn here)
        ("all_reduce_gradients(bucket_bytes=0)", lambda: mdist.all_reduce_gradients([], bucket_bytes=0)),
        ("all_reduce_arrays(float64 arrays)", lambda: mdist.all_reduce_arrays([np.zeros(3)])),
        ("all_reduce_arrays(read-only array)", lambda: mdist.all_reduce_arrays([_read_only(arrays[0])])),
        ("all_reduce_arrays(not arrays)", lambda: mdist.all_reduce_arrays([r.choice(WRONG_TYPES)])),
        ("all_reduce_gradients(not states)", lambda: mdist.all_reduce_gradients([arrays[0]])),
        ("all_reduce_gradients(weight=-1)", lambda: mdist.all_reduce_gradients([], weight=-1.0)),
        ("broadcast_arrays(src=5)", lambda: mdist.broadcast_arrays(arrays, src=5)),
        ("broadcast_arrays(src=-1)", lambda: mdist.broadcast_arrays(arrays, src=-1)),
        ("shard(rank_=3, world_size_=2)", lambda: mdist.shard(np.arange(4), 3, 2)),
        ("shard(world_size_=0)", lambda: mdist.shard(np.arange(4), 0, 0)),
        ("DataParallel(not a graph)", lambda: mdist.DataParallel(arrays)),
        ("sync_batch_norm_statistics(not a state)", lambda: mdist.sync_batch_norm_statistics(arrays[0], 4)),
        ("init_process_group(timeout_seconds=0)", lambda: mdist.init_process_group(timeout_seconds=0)),
    ]
    label, call = r.choice(calls)
    ctx.rejects(f"mpsgrad.distributed.{label}", call, expected=(ValueError, TypeError))


def _read_only(a):
    view = a.view()
    view.flags.writeable = False
    return view


# ---------------------------------------------------------------------------------------------
# host reads (issue 29 item 8, docs/user_guide.md "Reading results"): a result is readable once its
# command buffer completed, never before (CommandBufferError naming the buffer); a temporary result
# never after (ValueError); an image only the host wrote, always


@family("host_reads")
def host_read_ops(r: random.Random, ctx: Context):
    m = ctx.m
    x_arr = random_array(r, r.randint(1, 3), r.randint(1, 3), 4)
    x = m.Image.from_numpy(x_arr, ctx.device)
    relu = m.CNNNeuronReLU(ctx.device)  # persistent results (Context.m)
    cb = ctx.queue.command_buffer()
    label = r.choice(["", "step", "read me"])
    cb.label = label
    reads = [lambda i: i.to_numpy(), lambda i: i.read_bytes(), lambda i: np.from_dlpack(i), lambda i: np.asarray(i)]
    read = r.choice(reads)
    ctx.start_call()
    if r.random() < 0.5:
        y = relu.encode(cb, x)
    else:
        y = m.Image(ctx.device, m.ImageDescriptor(x_arr.shape[1], x_arr.shape[0], 4))
        relu.encode(cb, x, destination_image=y)
    error = ctx.rejects("reading a result before commit", read, y, expected=m.CommandBufferError)
    if label and f"'{label}'" not in str(error):
        raise WrongResult(f"the error does not name command buffer {label!r}: {error}")
    check_close(np.asarray(read(x)).reshape(x_arr.shape), x_arr, "a source only the host wrote")
    run(ctx, cb)
    check_close(np.asarray(read(y)).reshape(x_arr.shape), np.maximum(x_arr, 0), "the result after the wait")
    if r.random() < 0.5:
        cb2 = ctx.queue.command_buffer()
        t = ctx.m.module.CNNNeuronReLU(ctx.device).encode(cb2, x)  # the default: a temporary result
        run(ctx, cb2)
        ctx.rejects("reading a temporary result after its command buffer completed", read, t, expected=ValueError)


# ---------------------------------------------------------------------------------------------
# the batch helpers of MPSImage.h / MPSState.h (issue 29 item 12): each distinct object once


@family("batch_helpers")
def batch_helper_ops(r: random.Random, ctx: Context):
    m = ctx.m
    cb = ctx.queue.command_buffer()
    descs = [m.ImageDescriptor(r.randint(1, 4), r.randint(1, 4), r.choice([1, 4, 6])) for _ in range(3)]
    pool = [m.Image(ctx.device, d) if r.random() < 0.5 else m.TemporaryImage(cb, d) for d in descs]
    batch = [r.choice(pool) for _ in range(r.randint(0, 6))]
    distinct = list({id(i): i for i in batch}.values())
    ctx.start_call()
    action = r.choice(["resource_size", "iterate", "increment", "synchronize", "states", "resource_list",
                       "supports"])
    if action == "resource_size":
        if m.image_batch_resource_size(batch) != sum(i.resource_size for i in distinct):
            raise WrongResult("image_batch_resource_size does not count each distinct image once")
    elif action == "iterate":
        stop = r.randint(0, 4)
        visited = []

        def visit(image, index):
            visited.append(index)
            return -1 if len(visited) > stop else index
        got = m.image_batch_iterate(batch, visit)
        firsts = sorted({id(i): batch.index(i) for i in batch}.values())
        if visited != firsts[:stop + 1] or got != (visit_result(visited, stop)):
            raise WrongResult(f"image_batch_iterate visited {visited} returning {got}; first positions {firsts}")
    elif action == "increment":
        amount = r.randint(0, 3)
        before = {id(i): i.read_count for i in distinct if i.is_temporary}
        if m.image_batch_increment_read_count(batch, amount) != len(distinct):
            raise WrongResult("image_batch_increment_read_count does not return the number of distinct images")
        if any(i.read_count != before[id(i)] + amount for i in distinct if i.is_temporary):
            raise WrongResult("image_batch_increment_read_count changed a count by other than the amount")
    elif action == "synchronize":
        other = ctx.queue.command_buffer()
        target = r.choice([cb, other])
        foreign = any(i.is_temporary for i in distinct) and target is other
        if foreign:
            ctx.rejects("image_batch_synchronize with another buffer's temporary image", m.image_batch_synchronize,
                        batch, target, expected=ValueError)
        else:
            m.image_batch_synchronize(batch, target)
    elif action == "states":
        states = [m.State(ctx.device, r.randint(1, 64)) for _ in range(3)]
        sbatch = [r.choice(states) for _ in range(r.randint(0, 5))]
        unique = list({id(s): s for s in sbatch}.values())
        if m.state_batch_resource_size(sbatch) != sum(s.resource_size for s in unique):
            raise WrongResult("state_batch_resource_size does not count each distinct state once")
        m.state_batch_synchronize(sbatch, cb)
    elif action == "resource_list":
        sizes = [ctx.bad(r, r.randint(1, 256), [0, -1, "8", None, 2**64], what="size") for _ in range(r.randint(0, 3))]
        try:
            rl = m.StateResourceList(sizes)
        except (ValueError, TypeError):
            ctx.invalid = []
            return
        ctx.expect_rejected_if_invalid("StateResourceList")
        state = m.State(ctx.device, resource_list=rl)
        if state.resource_size != sum(sizes) or rl.buffer_sizes != sizes:
            raise WrongResult(f"State(resource_list={sizes}) has {state.resource_size} bytes")
    else:
        if m.supports_mtl_device(ctx.device) is not True or m.supports_mtl_device(None) is not False:
            raise WrongResult("supports_mtl_device: True for a Device, False for None")
        ctx.rejects("supports_mtl_device(not a device)", m.supports_mtl_device, r.choice(WRONG_TYPES[:2] + ["cpu"]),
                    expected=TypeError)


def visit_result(visited, stop):
    """What image_batch_iterate returns for the visitor above: the last value it returned (0 for none)."""
    if not visited:
        return 0
    return -1 if len(visited) > stop else visited[-1]


# ---------------------------------------------------------------------------------------------
# unknown keyword arguments (issue 29 item 14): one line naming the keyword and the accepted ones


@family("unknown_keywords")
def unknown_keyword_ops(r: random.Random, ctx: Context):
    m = ctx.m
    keyword = r.choice(["zz", "chanels", "devcie", "image", "kernel_widht", "x" * 40])
    image = m.Image.from_numpy(random_array(r, 2, 2, 4), ctx.device)
    calls = [
        ("ImageDescriptor", lambda **k: m.ImageDescriptor(width=2, **k), ["width", "feature_channels"]),
        ("CNNConvolutionDescriptor", lambda **k: m.CNNConvolutionDescriptor(kernel_width=1, **k), ["kernel_width"]),
        ("CNNNeuronReLU", lambda **k: m.CNNNeuronReLU(ctx.device, **k), ["device"]),
        ("Image.read_bytes", lambda **k: image.read_bytes(**k), ["data_layout", "image_index"]),
        ("Image.from_numpy", lambda **k: m.Image.from_numpy(random_array(r, 1, 1, 4), **k), ["array", "device"]),
        ("StateResourceList", lambda **k: m.StateResourceList(**k), ["buffer_sizes"]),
        ("image_batch_resource_size", lambda **k: m.image_batch_resource_size([image], **k), ["batch"]),
    ]
    name, call, accepted = r.choice(calls)
    ctx.start_call()
    error = ctx.rejects(f"{name}({keyword}=...)", call, expected=TypeError, **{keyword: image})
    text = str(error)
    if "\n" in text or f"'{keyword}'" not in text or any(a not in text for a in accepted) or "Invoked with" in text:
        raise WrongResult(f"{name}: the unknown keyword {keyword!r} is not named in one line: {text[:300]}")
