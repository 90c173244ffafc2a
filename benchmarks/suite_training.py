"""Loss and optimizer rows of benchmarks/run.py: softmax cross-entropy and Adam.

mpsgrad, one iteration: a command buffer, one encode, commit, wait.

| row                      | mpsgrad                                                  | PyTorch                                    |
|--------------------------|----------------------------------------------------------|--------------------------------------------|
| softmax CE loss+gradient | CNNLoss(SOFTMAX_CROSS_ENTROPY, MEAN, reduce_across_batch) | log_softmax, the mean loss and the gradient |
|                          | .encode_batch(cb, logits, labels): loss and dL/dy         | (softmax - t) / N, without autograd         |
| adam step                | NNOptimizerAdam.encode(cb, g, w, m, v) on Vectors (in place) | torch.optim.Adam(...).step() (p.grad set) |

Bytes: softmax CE reads logits and labels and writes the gradient (3 floats per element); Adam
reads g, w, m, v and writes w, m, v (7 floats per parameter).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m

# (label, N, N with --quick, classes): one 1x1 image of `classes` logits per sample
CE_SHAPES = [("", 256, 64, 1000), (" tiny", 4, 4, 10)]
# (label, parameters, parameters with --quick)
ADAM_SIZES = [("1M", 1 << 20, 1 << 20), ("tiny", 1000, 1000)]


def _run(queue, encode):
    cb = queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


def _softmax_ce_rows(spec, quick, device, queue, rng):
    suffix, n_full, n_quick, classes = spec
    n = n_quick if quick else n_full
    label = f"{n}x1x1x{classes}{suffix}"
    x = rng.standard_normal((n, 1, 1, classes), dtype=np.float32)
    t = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)].reshape(n, 1, 1, classes)
    xs = m.batch_from_numpy(x, device)
    labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(t[i])) for i in range(n)]
    d = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    loss = m.CNNLoss(device, d)
    dst = m.batch_from_numpy(np.zeros_like(x), device)
    tx, tt = torch.from_numpy(x.reshape(n, classes)), torch.from_numpy(t.reshape(n, classes))

    def theirs():
        logp = torch.log_softmax(tx, -1)
        value = -(tt * logp).sum() / n
        return value, (logp.exp() - tt) / n

    def check(compare):
        _run(queue, lambda cb: loss.encode_batch(cb, xs, labels, dst))
        value, grad = theirs()
        compare(label, "softmax CE", np.array([labels[0].loss_image.to_numpy().reshape(-1)[0]]),
                torch.tensor([F.cross_entropy(tx, tt).item()]))
        compare(label, "softmax CE gradient", m.batch_to_numpy(dst).reshape(n, classes), grad)

    yield ("loss", label, "softmax CE", 4.0 * 3 * x.size,
           lambda: _run(queue, lambda cb: loss.encode_batch(cb, xs, labels, dst)), theirs, check)


def _adam_rows(spec, quick, device, queue, rng):
    label, n_full, n_quick = spec
    n = n_quick if quick else n_full
    w0 = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(n, dtype=np.float32)
    vec = lambda a: m.Vector.from_numpy(a, device)  # noqa: E731
    gv, wv, mv, vv = vec(g), vec(w0), vec(np.zeros(n, np.float32)), vec(np.zeros(n, np.float32))
    adam = m.NNOptimizerAdam(device, 1e-3)
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    p.grad = torch.from_numpy(g.copy())
    opt = torch.optim.Adam([p], lr=1e-3)

    def check(compare):
        # One step from the same start on both sides (fresh state, then the timed loops continue).
        w1, m1, v1 = vec(w0), vec(np.zeros(n, np.float32)), vec(np.zeros(n, np.float32))
        _run(queue, lambda cb: m.NNOptimizerAdam(device, 1e-3).encode(cb, gv, w1, m1, v1))
        q = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        q.grad = torch.from_numpy(g.copy())
        torch.optim.Adam([q], lr=1e-3).step()
        compare(f"{label} parameters", "adam step", w1.to_numpy(), q.detach())

    yield ("optimizer", f"{label} parameters", "adam step", 4.0 * 7 * n,
           lambda: _run(queue, lambda cb: adam.encode(cb, gv, wv, mv, vv)), opt.step, check)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in CE_SHAPES:
        label = f"{spec[2] if quick else spec[1]}x1x1x{spec[3]}{spec[0]}"
        if selected(f"loss {label} softmax CE"):
            for fam, lab, op, amount, mine, theirs, check in _softmax_ce_rows(spec, quick, device, queue, rng):
                yield fam, lab, op, "byte", amount, mine, theirs, check
    for spec in ADAM_SIZES:
        if selected(f"optimizer {spec[0]} parameters adam step"):
            for fam, lab, op, amount, mine, theirs, check in _adam_rows(spec, quick, device, queue, rng):
                yield fam, lab, op, "byte", amount, mine, theirs, check
