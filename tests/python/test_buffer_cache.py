"""The CPU backend's recycling of large host buffers (docs/performance.md, "Buffer recycling").

A freed image's storage is kept for the next allocation of the same size, so a training step does
not page-fault its way through fresh memory on every encode; a recycled block must read exactly as
a new one (zero), and MPSGRAD_CPU_BUFFER_CACHE_MB bounds (or turns off) what is kept.
"""
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import mpsgrad as m

recycling = pytest.mark.skipif(m.buffer_cache_limit() == 0,
                               reason="buffer recycling is off (AddressSanitizer build or MPSGRAD_CPU_BUFFER_CACHE_MB=0)")

# 64 x 64 x 64 float32 pixels: 1 MiB per image, well above the smallest recycled block (256 KiB).
# The format is explicit (the float16 test pass would otherwise make half images of other sizes).
SHAPE = (2, 64, 64, 64)
F32 = m.ImageFeatureChannelFormat.FLOAT32


@pytest.fixture(autouse=True)
def _empty_cache():
    m.release_cached_buffers()
    yield
    m.release_cached_buffers()


@recycling
def test_a_freed_image_is_kept_and_a_new_one_of_its_size_still_reads_zero():
    device = m.Device("cpu")
    batch = m.batch_from_numpy(np.full(SHAPE, 7.5, dtype=np.float32), device, F32)
    del batch
    kept = m.cached_buffer_bytes()
    assert kept >= np.prod(SHAPE) * 4
    desc = m.ImageDescriptor(width=SHAPE[2], height=SHAPE[1], feature_channels=SHAPE[3], number_of_images=SHAPE[0],
                             channel_format=F32)
    image = m.Image(device, desc)
    assert m.cached_buffer_bytes() < kept, "the new image took the freed block"
    assert not np.any(image.to_numpy()), "a recycled block must be zero-filled like a new one"


@recycling
def test_release_cached_buffers_frees_them():
    batch = m.batch_from_numpy(np.ones(SHAPE, dtype=np.float32), m.Device("cpu"), F32)
    del batch
    assert m.cached_buffer_bytes() > 0
    m.release_cached_buffers()
    assert m.cached_buffer_bytes() == 0


@recycling
def test_repeated_encodes_stop_page_faulting():
    """The point of recycling: a steady-state encode touches resident pages only."""
    device = m.Device("cpu")
    queue = m.CommandQueue(device)
    xs = m.batch_from_numpy(np.random.default_rng(0).standard_normal((8, 56, 56, 64), dtype=np.float32), device, F32)
    relu = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    relu.destination_image_allocator = m.ImageAllocator.persistent()

    def step():
        cb = queue.command_buffer()
        ys = relu.encode_batch(cb, xs)
        cb.commit()
        cb.wait_until_completed()
        return ys

    kept = step()
    for _ in range(3):
        kept = step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        kept = step()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    pages = 8 * 56 * 56 * 64 * 4 / 4096
    assert faults < 0.1 * pages, f"{faults:.0f} page faults per encode of a {pages:.0f}-page destination"
    assert kept[0].width == 56


def test_the_environment_variable_turns_recycling_off():
    code = ("import numpy as np, mpsgrad as m\n"
            "b = m.batch_from_numpy(np.ones((2, 64, 64, 64), np.float32), m.Device('cpu'))\n"
            "del b\n"
            "print(m.buffer_cache_limit(), m.cached_buffer_bytes())\n")
    env = dict(os.environ, MPSGRAD_CPU_BUFFER_CACHE_MB="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0"]
    env["MPSGRAD_CPU_BUFFER_CACHE_MB"] = "3"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    limit, cached = map(int, out.stdout.split())
    assert limit in (0, 3 << 20)  # 0: an AddressSanitizer build never recycles
    assert cached <= limit
