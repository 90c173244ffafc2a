"""mpsgrad.distributed (docs/distributed.md): data-parallel training over torch.distributed.

Each multi-process test launches tests/python/distributed_worker.py twice (ranks 0 and 1) over
loopback with gloo, the way torchrun would (MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE), and
checks the saved results against a single-process run and against PyTorch autograd. The
processes run on the CPU device only: the exchange is the same whatever device computes.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import mpsgrad as m  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")
TIMEOUT = 20  # seconds: the process group's timeout in the workers
NAMES = ("conv_w", "conv_b", "bn_g", "bn_b", "fc_w", "fc_b")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(extra):
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(m.__file__))] + [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


def _launch(tmp_path, *args, world=2, wait=60):
    """Runs the worker as `world` ranks; returns [(returncode, stdout+stderr)] by rank."""
    port = str(_free_port())
    processes = []
    for rank in range(world):
        env = _environment({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(rank),
                            "WORLD_SIZE": str(world)})
        processes.append(subprocess.Popen([sys.executable, WORKER, *args, "--timeout", str(TIMEOUT)], cwd=tmp_path,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for p in processes:
        try:
            out, _ = p.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            for q in processes:
                q.kill()
            pytest.fail(f"a rank did not finish within {wait} s (a hang)")
        results.append((p.returncode, out))
    return results


def _reference(tmp_path, *args):
    """One process on the whole batch: `graph OUT [options]` with --reference; its npz."""
    out = subprocess.run([sys.executable, WORKER, *args, "--reference"], cwd=tmp_path, env=_environment({}),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    return np.load(tmp_path / args[1].format(rank=0))


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """One launch of 2 ranks for the trainings below (each launch costs seconds: importing torch):
    {name: [rank 0's npz, rank 1's]} and the ranks' output."""
    tmp_path = tmp_path_factory.mktemp("distributed")
    results = _launch(tmp_path, "suite", "{name}{rank}.npz")
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank}:\n{out}"
    loaded = {name: [np.load(tmp_path / f"{name}{r}.npz") for r in range(2)]
              for name in ("plain", "bn", "uneven", "sync", "syncgraph")}
    return loaded, [out for _, out in results], tmp_path


def test_import_mpsgrad_does_not_import_torch():
    code = "import sys, mpsgrad; assert 'torch' not in sys.modules, 'import mpsgrad imported torch'"
    subprocess.run([sys.executable, "-c", code], env=_environment({}), check=True, timeout=60)


def test_missing_torch_is_a_clear_import_error():
    # sys.modules["torch"] = None makes `import torch` fail as if it were not installed.
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import mpsgrad.distributed\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_environment({}), stdout=subprocess.PIPE, text=True,
                         check=True, timeout=60).stdout
    assert "pip install torch" in out and "mpsgrad.distributed needs PyTorch" in out


def test_two_ranks_match_one_process_on_the_full_batch(suite):
    """conv -> ReLU -> FC -> mean cross-entropy, 4 SGD steps: the weights are bitwise identical on
    both ranks (rank 1 started from other weights: the broadcast) and equal the single-process run
    on the full batch (the mean of the shards' mean-loss gradients is the full batch's gradient)."""
    ranks = suite[0]["plain"]
    reference = _reference(suite[2], "graph", "single{rank}.npz")
    for name in NAMES:
        assert np.array_equal(ranks[0][name], ranks[1][name]), name
        np.testing.assert_allclose(ranks[0][name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_unequal_shards_weighted_by_their_sizes_match_the_full_batch(suite):
    """Shards of 5 and 3 images with DataParallel.weight = shard size: the weighted mean of the
    shards' mean-loss gradients is the full batch's gradient."""
    ranks = suite[0]["uneven"]
    reference = _reference(suite[2], "graph", "single{rank}.npz")
    for name in NAMES:
        assert np.array_equal(ranks[0][name], ranks[1][name]), name
        np.testing.assert_allclose(ranks[0][name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _torch_data_parallel(initial, steps, batch_norm, shards):
    """PyTorch's data-parallel training of the worker's network (DDP without SyncBatchNorm: batch
    normalization over each shard, the shards' gradients averaged), SGD, in float64."""
    sys.path.insert(0, os.path.dirname(WORKER))
    try:
        import distributed_worker as w
    finally:
        sys.path.pop(0)
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in initial.items()}
    for step in range(steps):
        x, labels = w.global_batch(step)
        grads = {k: torch.zeros_like(v) for k, v in p.items()}
        for part in np.array_split(np.arange(w.N), shards):
            q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
            X = torch.tensor(x[part].transpose(0, 3, 1, 2), dtype=torch.float64)
            h = F.conv2d(X, q["conv_w"].permute(0, 3, 1, 2), q["conv_b"], padding=1)
            if batch_norm:
                h = F.batch_norm(h, None, None, q["bn_g"], q["bn_b"], training=True, eps=1e-5)
            h = torch.relu(h).permute(0, 2, 3, 1).reshape(len(part), -1)  # NHWC order, as the FC weights
            logits = h @ q["fc_w"].reshape(w.CLASSES, -1).T + q["fc_b"]
            loss = F.cross_entropy(logits, torch.tensor(labels[part]))
            loss.backward()
            for k in p:
                if q[k].grad is not None:
                    grads[k] += q[k].grad / shards
        p = {k: v - w.LR * grads[k] for k, v in p.items()}
    return {k: v.numpy() for k, v in p.items()}


def test_two_ranks_with_batch_normalization_match_pytorch_data_parallel(suite):
    """conv -> BN -> ReLU -> FC -> loss on 2 ranks: bitwise identical weights on both ranks, equal to
    PyTorch autograd's data-parallel step (BN statistics per rank, as DDP without SyncBatchNorm) and
    to the single process when it averages the same two shards."""
    ranks = suite[0]["bn"]
    sys.path.insert(0, os.path.dirname(WORKER))
    import distributed_worker as w
    sys.path.pop(0)
    initial = w.initial_weights(seed=7)  # rank 0's, broadcast to rank 1
    expected = _torch_data_parallel(initial, 4, True, shards=2)
    for name in NAMES:
        assert np.array_equal(ranks[0][name], ranks[1][name]), name
        np.testing.assert_allclose(ranks[0][name], expected[name], rtol=1e-4, atol=2e-5, err_msg=name)
    # The BN statistics differ per shard: the full batch trains differently (the test can fail).
    full = _torch_data_parallel(initial, 4, True, shards=1)
    assert np.abs(full["conv_w"] - ranks[0]["conv_w"]).max() > 1e-4


def test_sync_batch_norm_matches_batch_norm_over_all_ranks(suite):
    """Synchronized BN on unequal shards (4 and 2 images): each rank's output and input gradient are
    those of batch_norm over the whole batch (torch.nn.SyncBatchNorm's semantics), dγ and dβ the
    whole batch's scaled by the rank's share of the values."""
    ranks = suite[0]["sync"]
    r0 = ranks[0]
    X = torch.tensor(r0["x"].transpose(0, 3, 1, 2), dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor(r0["gamma"], dtype=torch.float64, requires_grad=True)
    beta = torch.tensor(r0["beta"], dtype=torch.float64, requires_grad=True)
    Y = F.batch_norm(X, None, None, gamma, beta, training=True, eps=1e-5)
    (Y * torch.tensor(r0["g"].transpose(0, 3, 1, 2), dtype=torch.float64)).sum().backward()
    y, dx = Y.detach().numpy().transpose(0, 2, 3, 1), X.grad.numpy().transpose(0, 2, 3, 1)
    n = len(r0["x"])
    for r in ranks:
        mine = r["mine"]
        assert int(r["total"]) == r0["x"][..., 0].size
        np.testing.assert_allclose(r["y"], y[mine], rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(r["dx"], dx[mine], rtol=1e-4, atol=2e-5)
        np.testing.assert_allclose(r["d_gamma"], gamma.grad.numpy() * len(mine) / n, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r["d_beta"], beta.grad.numpy() * len(mine) / n, rtol=1e-5, atol=1e-5)


def test_sync_batch_norm_in_a_graph_matches_one_process_on_the_full_batch(suite):
    """conv -> BN -> ReLU -> FC -> mean loss, 4 SGD steps, DataParallel(graph, sync_batch_norm=True):
    BN normalizes each rank's shard with the statistics of both shards together and its input
    gradient uses both shards' dγ/dβ (torch.nn.SyncBatchNorm), so the weights after the first step
    (the gradients) and after the last are bitwise identical on both ranks and equal to one process
    on the full batch, and to PyTorch autograd on the full batch."""
    ranks = suite[0]["syncgraph"]
    reference = _reference(suite[2], "graph", "singlebn{rank}.npz", "--bn")
    sys.path.insert(0, os.path.dirname(WORKER))
    import distributed_worker as w
    sys.path.pop(0)
    expected = _torch_data_parallel(w.initial_weights(seed=7), 4, True, shards=1)
    for name in NAMES:
        for key in (name, "first_" + name):
            assert np.array_equal(ranks[0][key], ranks[1][key]), key
            np.testing.assert_allclose(ranks[0][key], reference[key], rtol=1e-5, atol=1e-6, err_msg=key)
        np.testing.assert_allclose(ranks[0][name], expected[name], rtol=1e-4, atol=2e-5, err_msg=name)
    # Without the sync each rank normalizes its own shard: other weights (the test can fail).
    assert np.abs(suite[0]["bn"][0]["conv_w"] - ranks[0]["conv_w"]).max() > 1e-4


def test_a_rank_that_dies_during_sync_batch_norm_fails_the_command_buffer(tmp_path):
    """The exchange runs at a host point inside the command buffer: a dead peer fails the buffer
    (CommandBufferError naming the sync) on the surviving rank within the timeout, no hang."""
    results = _launch(tmp_path, "graph", "deadbn{rank}.npz", "--bn", "--sync-bn", "--die-after", "1", "--steps", "3",
                      wait=2 * TIMEOUT + 30)
    assert results[1][0] == 3
    code, out = results[0]
    assert code != 0 and "CommandBufferError" in out and "host callback failed" in out, out
    assert "mpsgrad.distributed: sync_batch_norm_statistics" in out and "rank 0" in out, out


def test_batch_normalization_sync_is_called_at_host_points_of_the_command_buffer(device):
    """NNGraph.batch_normalization_sync without any process group: the hook sees the state at the
    statistics stage before the normalization and at the gradients stage before the input
    gradient; what it writes there is what the later kernels use; its exception fails the buffer."""
    sys.path.insert(0, os.path.dirname(WORKER))
    import distributed_worker as w
    sys.path.pop(0)
    p = w.initial_weights(seed=3)
    norm = w.batch_normalization_source(p["bn_g"], p["bn_b"])
    x_node = m.NNImageNode(w.Handle("x"))
    bn = m.CNNBatchNormalizationNode(x_node, norm)
    bn.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    descriptor = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    loss = m.CNNLossNode(bn.result_image, descriptor)
    terminal = loss.training_graph()
    graph = m.NNGraph(device, [t.result_image for t in terminal], [True] + [False] * (len(terminal) - 1))
    graph.format = m.ImageFeatureChannelFormat.FLOAT32
    assert graph.batch_normalization_sync is None
    calls = []

    def hook(state, stage, count):
        calls.append((stage, count))
        if stage == "statistics":
            calls.append(np.array(state.mean))
            state.mean[...] = 0.0  # the normalization must read these values
            state.variance[...] = 1.0
        else:
            state.gradient_for_gamma[...] = 0.0  # and the input gradient these
            state.gradient_for_beta[...] = 0.0

    graph.batch_normalization_sync = hook
    assert graph.batch_normalization_sync is hook
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 3, w.C_MID)).astype(np.float32) + 2.0
    target = rng.standard_normal(x.shape).astype(np.float32)
    labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(t)) for t in target]
    queue = m.CommandQueue(device)
    source = m.batch_from_numpy(x, device)
    x = m.batch_to_numpy(source)  # as stored (rounded to float16 in the float16 test pass)
    cb = queue.command_buffer()
    dx = graph.encode_batch(cb, [source], [labels])
    cb.commit()
    cb.wait_until_completed()
    assert [c for c in calls if isinstance(c, tuple)] == [("statistics", 18), ("gradients", 18)], calls
    # In the float16 pass (MPSGRAD_TEST_IMAGE_FORMAT=float16) the kernel's mean is up to 5e-4 (2^-11) from this one.
    np.testing.assert_allclose(calls[1], x.reshape(-1, w.C_MID).mean(axis=0), rtol=2e-3, atol=2e-3)
    # With mean 0, variance 1 and zero dγ/dβ: y = γx + β and dX = γ·dY/sqrt(1 + eps), dY = 2(y - t).
    y = p["bn_g"] * x / np.sqrt(1 + 1e-5) + p["bn_b"]
    expected = p["bn_g"] / np.sqrt(1 + 1e-5) * 2 * (y - target)
    np.testing.assert_allclose(m.batch_to_numpy(dx), expected, rtol=2e-3, atol=2e-3)

    def failing(state, stage, count):
        raise RuntimeError("no peer")

    graph.batch_normalization_sync = failing
    cb = queue.command_buffer()
    graph.encode_batch(cb, [m.batch_from_numpy(x, device)], [labels])
    cb.commit()
    with pytest.raises(m.CommandBufferError, match="batch_normalization_sync: RuntimeError: no peer"):
        cb.wait_until_completed()
    graph.batch_normalization_sync = None
    with pytest.raises(TypeError, match="batch_normalization_sync"):
        graph.batch_normalization_sync = 3


def test_a_rank_that_dies_is_an_error_not_a_hang(tmp_path):
    results = _launch(tmp_path, "graph", "dead{rank}.npz", "--die-after", "1", "--steps", "3", wait=2 * TIMEOUT + 30)
    assert results[1][0] == 3
    code, out = results[0]
    assert code != 0 and "mpsgrad.distributed" in out and "rank 0" in out, out


def test_different_graph_shapes_across_ranks_are_an_error(suite):
    """Rank 1 builds a wider FC layer: the first step raises ValueError on both ranks, naming the
    layouts (the suite catches and prints it)."""
    for out in suite[1]:
        assert "wide-fc: ValueError: all_reduce_gradients: the ranks' gradient layouts differ" in out, out
        assert "rank 1: 4 arrays" in out and "(4, 6, 6, 4)" in out, out


# ---- single process: argument checks and the hook itself --------------------------------------------------

def test_before_updates_refuses_gpu_style_and_bad_values():
    device = m.Device("cpu")
    with pytest.raises(TypeError, match="before_updates"):
        graph = m.NNGraph(device, m.CNNNeuronReLUNode(m.NNImageNode(None)).result_image)
        graph.before_updates = 3
    graph.before_updates = print
    assert graph.before_updates is print
    graph.before_updates = None
    assert graph.before_updates is None


def test_before_updates_sees_every_gradient_before_the_updates_and_refuses_gpu_style():
    """Single process: the hook gets the conv and FC gradient states while the weights are still the
    initial ones (no update ran yet); scaling the gradients there scales the SGD step. A node that
    trains UPDATE_DEVICE_GPU is refused at encode."""
    sys.path.insert(0, os.path.dirname(WORKER))
    import distributed_worker as w
    sys.path.pop(0)
    device = m.Device("cpu")
    init = w.initial_weights(seed=3)

    def one_step(scale, style=m.NNTrainingStyle.UPDATE_DEVICE_CPU):
        conv, fc = w.ConvSource(init["conv_w"], init["conv_b"], w.LR), w.ConvSource(init["fc_w"], init["fc_b"], w.LR)
        c = m.CNNConvolutionNode(m.NNImageNode(w.Handle("x")), conv)
        f = m.CNNFullyConnectedNode(m.CNNNeuronReLUNode(c.result_image).result_image, fc)
        c.training_style = f.training_style = style
        descriptor = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
        terminal = m.CNNLossNode(f.result_image, descriptor).training_graph()
        graph = m.NNGraph(device, [t.result_image for t in terminal], [False] * len(terminal))
        seen = []

        def hook(states):
            seen.append([type(s).__name__ for s in states])
            assert np.array_equal(conv.w, init["conv_w"]) and np.array_equal(fc.w, init["fc_w"])
            for s in states:
                s.gradient_for_weights[...] *= scale
                s.gradient_for_biases[...] *= scale

        graph.before_updates = hook
        x, labels = w.global_batch(0)
        onehot = np.eye(w.CLASSES, dtype=np.float32)[labels].reshape(-1, 1, 1, w.CLASSES)
        states = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(t)) for t in onehot]
        cb = m.CommandQueue(device).command_buffer()
        graph.encode_batch(cb, [m.batch_from_numpy(x, device)], [states])
        cb.commit()
        cb.wait_until_completed()
        return seen, conv.w - init["conv_w"]

    seen, step1 = one_step(1.0)
    assert seen == [["CNNConvolutionGradientState", "CNNConvolutionGradientState"]]
    _, step3 = one_step(3.0)
    assert np.abs(step1).max() > 0
    np.testing.assert_allclose(step3, 3 * step1, rtol=1e-4, atol=1e-7)

    class GpuWeights(w.ConvSource):
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            return None

    w.ConvSource, plain = GpuWeights, w.ConvSource
    try:
        with pytest.raises(ValueError, match="before_updates: .* UPDATE_DEVICE_GPU"):
            one_step(1.0, m.NNTrainingStyle.UPDATE_DEVICE_GPU)
    finally:
        w.ConvSource = plain


def test_gradient_arrays_rejects_other_objects():
    import mpsgrad.distributed as mdist

    with pytest.raises(TypeError, match="states: expected"):
        mdist.gradient_arrays(np.zeros(3))
    with pytest.raises(ValueError, match="rank"):
        mdist.shard(np.arange(4), 2, 2)
    assert mdist.shard(np.arange(5), 1, 2).tolist() == [3, 4]
    with pytest.raises(RuntimeError, match="not initialized"):
        mdist.all_reduce_gradients([])
