"""Serialization byte layout (an independent encoder of docs/serialization.md) and hostile input:
truncations, bit flips, wrong envelopes, huge declared sizes -- ValueError, never a crash.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest

import mpsgrad as m
from serialization_cases import descriptor_objects


# ---------------------------------------------------------------------------------------------
# the documented byte layout, checked by an independent encoder


def blob(tag, payload, class_version=1, format_version=1, magic=b"MPSGRAD\0"):
    head = magic + struct.pack("<III", format_version, class_version, len(tag)) + tag.encode()
    body = head + struct.pack("<Q", len(payload)) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def f32s(values):
    return struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}f", *values)


def string(s):
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def test_documented_layout():
    d = m.NNNeuronDescriptor.prelu([1.0, -2.0])
    d.a, d.b, d.c = 0.5, 0.25, 2.0
    expected = blob("NNNeuronDescriptor", struct.pack("<ifff", 10, 0.5, 0.25, 2.0) + f32s([1.0, -2.0]))
    assert d.to_bytes() == expected
    state = m.State("cpu", 8)
    state.buffer_at_index(0)[...] = [1.0, 2.0]
    state.label = "s"
    assert state.to_bytes() == blob("State", string("s") + struct.pack("<Q", 1) + struct.pack("<Q2f", 8, 1.0, 2.0))
    image_descriptor = m.ImageDescriptor(2, 3, 4, 5)
    assert image_descriptor.to_bytes() == blob("ImageDescriptor", struct.pack("<IqqqqI", 4, 2, 3, 4, 5, 3))


def test_hand_built_kernel_decodes():
    """A CNNSoftMax written by the independent encoder from the documented payload."""
    base = struct.pack("<I", 1) + string("hand")  # options, label
    cnn = struct.pack("<3q", 1, 2, 0) + struct.pack("<3q3Q", 0, 0, 0, 4, 5, 1) + struct.pack("<qqQI", 0, 0, 2**64 - 1, 1)
    cnn += bytes([1]) + struct.pack("<I", 16) + bytes([2])  # NNDefaultPadding(SIZE_SAME), persistent allocator
    k = m.Kernel.from_bytes(blob("CNNSoftMax", base + cnn), "cpu")
    assert isinstance(k, m.CNNSoftMax) and k.label == "hand" and k.options == 1
    assert k.offset == m.Offset(1, 2, 0) and k.edge_mode == m.ImageEdgeMode.CLAMP
    assert k.padding.padding_method() == 16 and k.destination_image_allocator is m.ImageAllocator.persistent()


# ---------------------------------------------------------------------------------------------
# hostile input


def test_wrong_envelope():
    good = m.CNNSoftMax("cpu").to_bytes()
    payload = good[8 + 12 + len("CNNSoftMax") + 8:-4]
    cases = {
        "magic": blob("CNNSoftMax", payload, magic=b"MPSGRAX\0"),
        "format version": blob("CNNSoftMax", payload, format_version=2),
        "class version": blob("CNNSoftMax", payload, class_version=9),
        "class version 0": blob("CNNSoftMax", payload, class_version=0),
        "unknown class": blob("CNNSoftMix", payload),
        "bad tag bytes": blob("CNN\nSoftMax", payload),
        "empty": b"",
        "CRC-32": good[:-1] + bytes([good[-1] ^ 1]),
        "trailing byte": good + b"\0",
        "payload too long": blob("CNNSoftMax", payload + b"\0"),
        "payload too short": blob("CNNSoftMax", payload[:-1]),
    }
    for what, data in cases.items():
        with pytest.raises(m.SerializationError):
            m.Kernel.from_bytes(data, "cpu")
        assert issubclass(m.SerializationError, ValueError), what
    with pytest.raises(m.SerializationError, match="holds a serialized CNNSoftMax, not a CNNConvolution"):
        m.CNNConvolution.from_bytes(good)


HUGE = 2**62


def test_huge_declared_sizes_raise_without_allocating():
    """Every size field set to 2**62, decoded in a subprocess whose address space is capped at 512 MiB
    above what its imports took: an attempt to allocate 2**62 * k bytes would give MemoryError (or
    kill the process), not the SerializationError required."""
    script = """
        import resource, struct, zlib
        import mpsgrad as m
        from test_serialization_format import blob, string, HUGE
        size = [int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmSize')][0] * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), size + (512 << 20)))
        d = m.CNNConvolutionDescriptor(1, 1, 4, 4).to_bytes()
        cases = {
            'state resource count': blob('State', string('') + struct.pack('<Q', HUGE)),
            'state resource size': blob('State', string('') + struct.pack('<QQ', 1, HUGE) + b'x' * 64),
            'neuron data': blob('NNNeuronDescriptor', struct.pack('<ifffQ', 1, 0, 0, 0, HUGE)),
            'label': blob('CNNSoftMax', struct.pack('<IQ', 0, HUGE) + b'x' * 100),
            'nested descriptor': blob('CNNNeuron', struct.pack('<Q', HUGE) + b'x' * 100),
            'weights': blob('CNNConvolutionWeightsDataSource', struct.pack('<Q', len(d)) + d + struct.pack('<Q', HUGE)),
            'kernel weights': blob('CNNConvolution', struct.pack('<Q', len(d)) + d + struct.pack('<Q', HUGE)),
            'tag length': b'MPSGRAD\\0' + struct.pack('<IIIQ', 1, 1, 2**31, HUGE) + b'x' * 40,
            'payload size': blob('State', b'')[:-12] + struct.pack('<Q', HUGE) + b'\\0' * 4,
        }
        for name, data in cases.items():
            for decode in (lambda: m.Kernel.from_bytes(data, 'cpu'), lambda: m.State.from_bytes(data, 'cpu'),
                           lambda: m.NNNeuronDescriptor.from_bytes(data),
                           lambda: m.CNNConvolutionWeightsDataSource.from_bytes(data)):
                try:
                    decode()
                except m.SerializationError:
                    pass
                else:
                    raise SystemExit('decoded hostile data: ' + name)
        print('ok', len(cases))
    """
    result = run_isolated(script)
    assert result.stdout.strip().endswith("ok 9"), result.stdout + result.stderr


def run_isolated(script, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), os.path.dirname(os.path.dirname(m.__file__))]
                                        + env.get("PYTHONPATH", "").split(os.pathsep))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, f"subprocess died with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


# Objects whose blobs the corruption loops attack (built in the subprocess).
CORRUPTION_SETUP = """
    import json, random, struct, sys, zlib
    import numpy as np
    import mpsgrad as m
    from serialization_cases import configured, conv_source, states, descriptor_objects, public_properties

    objects = [configured('CNNConvolution[grouped,neuron,nobias]', 'cpu'), configured('CNNNeuron[prelu]', 'cpu'),
               configured('CNNMultiplyGradient[True]', 'cpu'), configured('NNCompare', 'cpu'),
               configured('CNNConvolutionGradient', 'cpu'), configured('CNNPoolingAverageGradient', 'cpu'),
               configured('CNNUpsamplingBilinear', 'cpu'), configured('CNNDropout', 'cpu'),
               states('cpu')[0], states('cpu')[2]] \\
              + descriptor_objects()

    def decode(obj, data):
        if isinstance(obj, m.Kernel):
            return m.Kernel.from_bytes(data, 'cpu')
        if isinstance(obj, m.State):
            return m.State.from_bytes(data, 'cpu')
        return type(obj).from_bytes(data)

    def exercise(obj):
        # A decoded object must be fully usable: every property readable, re-encodable.
        public_properties(obj)
        again = obj.to_bytes()
        assert decode(obj, again).to_bytes() == again

    def fix_crc(data):
        return data[:-4] + struct.pack('<I', zlib.crc32(data[:-4]))

    counts = {'value_error': 0, 'decoded': 0}
    def attempt(obj, data):
        try:
            back = decode(obj, data)
        except ValueError:
            counts['value_error'] += 1
            return
        exercise(back)
        counts['decoded'] += 1
"""


def test_every_truncation_raises():
    script = CORRUPTION_SETUP + """
    for obj in objects:
        data = obj.to_bytes()
        for n in range(len(data)):
            for candidate in (data[:n], fix_crc(data[:n]) if n >= 4 else data[:n]):
                attempt(obj, candidate)
        assert counts['decoded'] == 0, 'a truncated blob decoded'
    print(json.dumps(counts))
    """
    counts = json.loads(run_isolated(script).stdout.strip().splitlines()[-1])
    print(f"truncations: {counts}")
    assert counts["decoded"] == 0 and counts["value_error"] > 2000


@pytest.mark.parametrize("repair_crc", [False, True])
def test_random_bit_flips(repair_crc):
    """2,000 single-bit flips per object (with repair_crc the checksum is recomputed so the flips
    reach the payload decoders): each raises ValueError or decodes to a usable object."""
    seed = int.from_bytes(os.urandom(4), "little")
    script = CORRUPTION_SETUP + f"""
    gen = random.Random({seed})
    for obj in objects:
        data = obj.to_bytes()
        for _ in range(2000):
            bit = gen.randrange(len(data) * 8)
            flipped = bytearray(data)
            flipped[bit // 8] ^= 1 << (bit % 8)
            flipped = bytes(flipped)
            attempt(obj, fix_crc(flipped) if {repair_crc} else flipped)
    print(json.dumps(counts))
    """
    counts = json.loads(run_isolated(script).stdout.strip().splitlines()[-1])
    print(f"seed {seed}: {counts}")
    total = counts["value_error"] + counts["decoded"]
    assert total == 2000 * len(descriptor_objects()) + 2000 * 10
    if not repair_crc:
        assert counts["decoded"] == 0  # CRC-32 detects every single-bit error
    else:
        assert counts["decoded"] > 0 and counts["value_error"] > 0
