"""mpsgrad.profile() (issue 30, item 2): the CPU backend's ops are recorded with the graph node that
encoded them, their wall and CPU times add up, and the table and Chrome trace are well formed."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mpsgrad as m


class Name:
    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


def small_graph(device):
    rng = np.random.default_rng(0)
    desc = m.CNNConvolutionDescriptor(3, 3, 4, 8)
    weights = m.CNNConvolutionWeightsDataSource(desc, rng.normal(0, 0.1, (8, 3, 3, 4)).astype(np.float32),
                                                np.zeros(8, np.float32))
    conv = m.CNNConvolutionNode(m.NNImageNode(Name("x")), weights)
    conv.label = "conv1"
    pool = m.CNNPoolingMaxNode(m.CNNNeuronReLUNode(conv.result_image).result_image, filter_size=2)
    graph = m.NNGraph(device, pool.result_image)
    graph.format = m.ImageFeatureChannelFormat.FLOAT32  # no format conversions among the ops
    x = m.batch_from_numpy(rng.normal(size=(2, 8, 8, 4)).astype(np.float32), device)
    return graph, x


def run(device, graph, x):
    cb = m.CommandQueue(device).command_buffer()
    graph.encode_batch(cb, [x])
    cb.commit()
    cb.wait_until_completed()
    return cb


def test_graph_ops_are_recorded_under_their_nodes():
    device = m.Device("cpu")
    graph, x = small_graph(device)
    with m.profile() as prof:
        run(device, graph, x)
        run(device, graph, x)
    # FLOAT16 sources (the suite's float16 pass) run the half convolution op.
    ops = {e.op.replace("Half", "") for e in prof.events}
    assert "convolutionForward" in ops and "poolingForward" in ops, ops
    scopes = {e.scope for e in prof.events}
    # The ReLU runs fused into the convolution: one node label says so.
    assert "CNNConvolutionNode conv1 + neuron" in scopes, scopes
    assert all(e.backend == "cpu" and e.wall_us >= 0 and e.cpu_us >= 0 for e in prof.events)
    assert len({e.command_buffer for e in prof.events}) == 2
    # Events are in time order within a command buffer and do not overlap (one queue).
    for a, b in zip(prof.events, prof.events[1:]):
        if a.command_buffer == b.command_buffer:
            assert b.start_us >= a.start_us + a.wall_us - 1e-3
    by_node = prof.rows("node")
    assert sum(r.calls for r in by_node) == len(prof.events)
    assert by_node == sorted(by_node, key=lambda r: -r.wall_us)
    assert abs(sum(r.wall_us for r in prof.rows("op")) - sum(e.wall_us for e in prof.events)) < 1e-6


def test_table_and_chrome_trace(tmp_path):
    device = m.Device("cpu")
    graph, x = small_graph(device)
    with m.profile() as prof:
        run(device, graph, x)
    table = prof.table(by="node+op", limit=1)
    assert table.splitlines()[0].split()[:2] == ["node+op", "calls"]
    assert "more)" in table and table.splitlines()[-1].startswith("total")
    path = tmp_path / "trace.json"
    prof.save_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    assert len(trace["traceEvents"]) == len(prof.events)
    assert all(e["ph"] == "X" and e["dur"] >= 0 and "node" in e["args"] for e in trace["traceEvents"])
    with pytest.raises(ValueError, match="by"):
        prof.rows("kernel")


def test_nothing_is_recorded_outside_the_context():
    device = m.Device("cpu")
    graph, x = small_graph(device)
    with m.profile() as first:
        pass
    run(device, graph, x)  # profiler off
    with m.profile() as second:
        pass
    assert first.events == [] and second.events == []
    # Encoded while on, run after the context closed: not recorded either.
    cb = m.CommandQueue(device).command_buffer()
    with m.profile() as third:
        graph.encode_batch(cb, [x])
    cb.commit()
    cb.wait_until_completed()
    assert third.events == []


def test_one_profile_at_a_time():
    with m.profile():
        with pytest.raises(RuntimeError, match="already open"):
            with m.profile():
                pass
    with m.profile() as again:  # the first one closed cleanly
        pass
    assert again.events == []
