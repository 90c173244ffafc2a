"""Fuzz family: serialization (docs/serialization.md). Round trips of random kernels, descriptors and
graphs (to_bytes / from_bytes and pickle re-encode to the same bytes; a decoded kernel computes what
the original does), and hostile blobs: truncations, bit flips with and without the CRC recomputed,
size fields set to 2**31 .. 2**64 - 1, wrong magic, versions and tags. Every malformed blob must raise
mpsgrad.SerializationError (a ValueError subclass); a mutated blob that decodes must re-encode.
"""
from __future__ import annotations

import pickle
import random
import struct
import zlib

import numpy as np

from fuzz_support import Context, WrongResult, check_close, family, random_array, run, same_bytes


def _neuron_descriptor(r, ctx):
    m = ctx.m
    kind = r.choice(["RELU", "TANH", "LINEAR", "SIGMOID", "ELU", "SOFT_PLUS"])
    return m.NNNeuronDescriptor(getattr(m.CNNNeuronType, kind), r.uniform(-2, 2), r.uniform(-2, 2))


def _convolution(r, ctx):
    m = ctx.m
    k, cin, cout = r.choice([1, 3]), r.randint(1, 5), r.randint(1, 5)
    d = m.CNNConvolutionDescriptor(k, k, cin, cout)
    d.stride_in_pixels_x = r.randint(1, 3)
    return m.CNNConvolution(ctx.device, m.CNNConvolutionWeightsDataSource(
        d, random_array(r, cout, k, k, cin), random_array(r, cout)))


def _pooling(r, ctx):
    name = r.choice(["CNNPoolingMax", "CNNPoolingAverage", "CNNPoolingL2Norm"])
    return getattr(ctx.m, name)(ctx.device, r.randint(1, 4), r.randint(1, 4), r.randint(1, 3), r.randint(1, 3))


def _local_normalization(r, ctx):
    m = ctx.m
    if r.random() < 0.3:
        return m.CNNCrossChannelNormalization(ctx.device, r.randint(1, 7))
    k = r.randint(1, 5)
    return getattr(m, r.choice(["CNNSpatialNormalization", "CNNLocalContrastNormalization"]))(ctx.device, k, k)


def _batch_normalization(r, ctx):
    m = ctx.m
    c = r.randint(1, 6)
    gamma, beta, mean, var = (random_array(r, c) for _ in range(4))
    return m.CNNBatchNormalization(ctx.device, m.CNNBatchNormalizationWeightsDataSource(
        gamma, beta, mean, np.abs(var) + 0.5))


def _instance_normalization(r, ctx):
    m = ctx.m
    c = r.randint(1, 6)
    return m.CNNInstanceNormalization(ctx.device, m.CNNInstanceNormalizationWeightsDataSource(
        random_array(r, c), random_array(r, c)))


def _graph(r, ctx):
    m = ctx.m
    image = m.CNNNeuronTanHNode(m.NNImageNode()).result_image
    if r.random() < 0.5:
        image = m.CNNPoolingMaxNode(image, 2, 2).result_image
    return m.NNGraph(ctx.device, image)


# name -> (maker, is a normalization object (hostile blobs gated by serialization.normalization),
#          can run on an image)
OBJECTS = {
    "NNNeuronDescriptor": (_neuron_descriptor, False, False),
    "CNNNeuron": (lambda r, ctx: ctx.m.CNNNeuron(ctx.device, _neuron_descriptor(r, ctx)), False, True),
    "CNNConvolution": (_convolution, False, False),
    "CNNPooling": (_pooling, False, True),
    "CNNDropout": (lambda r, ctx: ctx.m.CNNDropout(ctx.device, r.choice([0.5, 0.9]), r.getrandbits(32), (1, 1, 1)),
                   False, False),
    "CNNUpsamplingBilinear": (lambda r, ctx: ctx.m.CNNUpsamplingBilinear(ctx.device, r.randint(1, 3),
                                                                         r.randint(1, 3)), False, True),
    "CNNSoftMax": (lambda r, ctx: ctx.m.CNNSoftMax(ctx.device), False, True),
    "local_normalization": (_local_normalization, True, True),
    "CNNBatchNormalization": (_batch_normalization, True, False),
    "CNNInstanceNormalization": (_instance_normalization, True, False),
    "NNGraph": (_graph, False, False),
}


def decode(ctx: Context, obj, data):
    cls = type(obj)
    if isinstance(obj, (ctx.m.Kernel, ctx.m.NNGraph)):
        return cls.from_bytes(data, ctx.device)
    return cls.from_bytes(data)


def _crc_fixed(blob: bytearray) -> bytes:
    blob[-4:] = struct.pack("<I", zlib.crc32(bytes(blob[:-4])))
    return bytes(blob)


def mutate(r: random.Random, blob: bytes):
    """(mutated blob, description, True when it must fail whatever the payload)."""
    b = bytearray(blob)
    tag_len = struct.unpack_from("<I", b, 16)[0]
    payload = 28 + tag_len
    how = r.choice(["truncate", "flip", "flip_crc", "size_crc", "magic", "version", "tag", "append"])
    if how == "truncate":
        n = r.randrange(len(b))
        return bytes(b[:n]), f"truncated to {n} bytes", True
    if how == "flip":
        i = r.randrange(len(b) * 8)
        b[i // 8] ^= 1 << (i % 8)
        return bytes(b), f"bit {i} flipped", True
    if how == "flip_crc":
        i = r.randrange(payload * 8, (len(b) - 4) * 8) if len(b) - 4 > payload else 0
        b[i // 8] ^= 1 << (i % 8)
        return _crc_fixed(b), f"bit {i} flipped, CRC recomputed", False
    if how == "size_crc":
        width = r.choice([4, 8])
        at = r.randrange(payload, max(payload + 1, len(b) - 4 - width))
        value = r.choice([2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1]) % (2 ** (8 * width))
        b[at:at + width] = value.to_bytes(width, "little")
        return _crc_fixed(b), f"{width}-byte field at {at} set to {value}, CRC recomputed", False
    if how == "magic":
        b[r.randrange(8)] ^= 0x20
        return _crc_fixed(b), "wrong magic", True
    if how == "version":
        at = r.choice([8, 12])
        # 0 is never valid; above the current version is data from a newer mpsgrad (a class reads its
        # older versions, so only versions above the blob's own are sure to fail)
        current = struct.unpack_from("<I", b, at)[0]
        b[at:at + 4] = struct.pack("<I", r.choice([0, current + 1, current + 98, 2**32 - 1]))
        return _crc_fixed(b), f"version field at {at} changed", True
    if how == "tag":
        b[20] = ord("Z") if b[20] != ord("Z") else ord("Y")
        return _crc_fixed(b), "unknown class tag", True
    b[-4:-4] = b"\0" * r.randint(1, 9)  # bytes the payload size does not declare
    return _crc_fixed(b), "bytes appended to the payload", True


@family("serialization")
def serialization_ops(r: random.Random, ctx: Context):
    m = ctx.m
    name = r.choice(sorted(OBJECTS))
    make, normalization, runnable = OBJECTS[name]
    obj = make(r, ctx)
    ctx.start_call()
    blob = obj.to_bytes()
    copy = decode(ctx, obj, blob)
    same_bytes(copy.to_bytes(), blob, f"{name} from_bytes(to_bytes()).to_bytes()")
    if r.random() < 0.3:
        ctx.start_call()
        same_bytes(pickle.loads(pickle.dumps(obj, protocol=r.randint(0, 5))).to_bytes(), blob, f"{name} pickle")
    if runnable and r.random() < 0.5:
        _same_output(r, ctx, obj, copy, name)
    if normalization and not ctx.reach(r, "serialization.normalization", 1.0):
        return
    for _ in range(r.randint(1, 3)):
        _hostile(r, ctx, obj, blob, name)


def _same_output(r, ctx, obj, copy, name):
    m = ctx.m
    x = m.Image.from_numpy(random_array(r, r.randint(2, 5), r.randint(2, 5), r.randint(1, 6)), ctx.device)
    cb = ctx.queue.command_buffer()
    a, b = obj.encode(cb, x), copy.encode(cb, x)
    run(ctx, cb)
    check_close(b.to_numpy(), a.to_numpy(), f"{name} decoded computes as the original", tol=0.0)


def _hostile(r, ctx, obj, blob, name):
    m = ctx.m
    bad, what, must_fail = mutate(r, blob)
    label = f"{name}.from_bytes({what})"
    if must_fail:
        ctx.rejects(label, decode, ctx, obj, bad, expected=m.SerializationError)
        return
    ctx.start_call()
    try:
        decoded = decode(ctx, obj, bad)
    except m.SerializationError:
        return
    except ValueError as e:
        from fuzz_support import WrongExceptionType
        raise WrongExceptionType(f"{label}: raised {type(e).__name__} ({e}), documented: SerializationError")
    again = decoded.to_bytes()  # a blob that decodes is an object that works and re-encodes
    if decode(ctx, obj, again).to_bytes() != again:
        raise WrongResult(f"{label}: the decoded object does not re-encode stably")
