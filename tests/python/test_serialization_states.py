"""Serialization of descriptors, the weights data source and the states: round trips, pickle, the
classes that are not serializable (TypeError, never an abort).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import mpsgrad as m
from conftest import _REQUESTED, randn, rng
from serialization_cases import PROTOCOLS, assert_same_properties, bn_source, conv_source, descriptor_objects, group_source, instance_source, states, transpose_source
from serialization_outputs import image, run_unary


# ---------------------------------------------------------------------------------------------
# descriptors, data sources, states




@pytest.mark.parametrize("index", range(len(descriptor_objects())))
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_descriptor_and_data_source_round_trip(index, protocol):
    obj = descriptor_objects()[index]
    blob = obj.to_bytes()
    back = type(obj).from_bytes(blob)
    assert back.to_bytes() == blob
    assert_same_properties(obj, back)
    if isinstance(obj, m.CNNConvolutionWeightsDataSource):
        assert back.label() == obj.label()
        assert back.descriptor().to_bytes() == obj.descriptor().to_bytes()
        assert np.asarray(back.weights).tobytes() == np.asarray(obj.weights).tobytes()
    pickled = pickle.loads(pickle.dumps(obj, protocol=protocol))
    assert pickled.to_bytes() == blob


def test_descriptor_from_bytes_rejects_other_classes():
    blob = m.NNNeuronDescriptor(m.CNNNeuronType.RELU).to_bytes()
    with pytest.raises(m.SerializationError, match="expected a CNNConvolutionDescriptor"):
        m.CNNConvolutionDescriptor.from_bytes(blob)
    with pytest.raises(ValueError, match="kernel class"):
        m.Kernel.from_bytes(blob)
    with pytest.raises(ValueError, match="state class"):
        m.State.from_bytes(blob)
    with pytest.raises(TypeError, match="bytes-like"):
        m.Kernel.from_bytes("MPSGRAD")
    with pytest.raises(TypeError, match="device"):
        m.Kernel.from_bytes(m.CNNSoftMax("cpu").to_bytes(), 3.5)
    with pytest.raises(ValueError):
        m.Kernel.from_bytes(m.CNNSoftMax("cpu").to_bytes(), "tpu")




def image_holding_states(device):
    """States that hold images, which have no coder (as MPSImage): they refuse with TypeError."""
    labels = m.CNNLossLabels(device, m.CNNLossDataDescriptor(randn(rng("labels"), 2, 3, 4)))
    return [labels]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_state_round_trip(device, protocol):
    for state in states(device):
        blob = state.to_bytes()
        for target in _REQUESTED:
            back = m.State.from_bytes(blob, target)
            assert type(back) is type(state) and back.label == state.label and not back.is_temporary
            assert back.to_bytes() == blob
            assert [back.buffer_size_at_index(i) for i in range(back.resource_count)] == \
                [state.buffer_size_at_index(i) for i in range(state.resource_count)]
            for i in range(state.resource_count):
                assert back.buffer_at_index(i).tobytes() == state.buffer_at_index(i).tobytes()
        back = pickle.loads(pickle.dumps(state, protocol=protocol))
        assert back.to_bytes() == blob and back.device == device


def test_weights_state_reloads_into_a_convolution(device):
    """A decoded CNNConvolutionWeightsAndBiasesState is a real state: a kernel reloads from it."""
    q = m.CommandQueue(device)
    conv = m.CNNConvolution(device, conv_source())
    cb = q.command_buffer()
    exported = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    back = m.CNNConvolutionWeightsAndBiasesState.from_bytes(exported.to_bytes(), device)
    other = m.CNNConvolution(device, conv_source("other"))
    cb = q.command_buffer()
    other.reload_weights_and_biases_with_command_buffer(cb, back)
    cb.commit()
    cb.wait_until_completed()
    x = image(rng("x"), device, 7, 7, 8)
    assert run_unary(q, conv, x).tobytes() == run_unary(q, other, x).tobytes()


def test_dropout_copy_continues_the_mask_sequence(device):
    """encode_count round-trips: a copy taken after n encodes draws the mask the original draws next."""
    q = m.CommandQueue(device)
    k = m.CNNDropout(device, 0.5, 99, (1, 1, 1))
    x = image(rng("x"), device, 7, 9)
    first = run_unary(q, k, x)
    copy_ = m.Kernel.from_bytes(k.to_bytes(), device)
    assert copy_.encode_count == k.encode_count == 1
    a, b = run_unary(q, k, x), run_unary(q, copy_, x)
    assert a.tobytes() == b.tobytes() and a.tobytes() != first.tobytes()


def gradient_states(device):
    """One gradient state of every family, each from a real forward pass."""
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = []
    for k in (m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU)), m.CNNConvolution(device, conv_source()),
              m.CNNSoftMax(device), m.CNNPoolingMax(device, 2, 2, 2, 2), m.CNNUpsamplingNearest(device, 2, 2),
              m.CNNDropout(device, 0.5, 1, (1, 1, 1)), m.CNNInstanceNormalization(device, instance_source(8)),
              m.CNNGroupNormalization(device, group_source(8, 2)), m.CNNConvolutionTranspose(device, transpose_source()),
              m.NNReshape(device), m.NNPad(device, (1, 1, 0), (1, 1, 0)), m.CNNSpatialNormalization(device, 3, 3),
              m.NNGramMatrixCalculation(device), m.NNReductionSpatialMean(device)):
        out.append(k.encode(cb, image(rng("x"), device, 7, 9), destination_state_is_temporary=False)[1])
    _, state = m.CNNAdd(device).encode(cb, image(rng("x"), device), image(rng("y"), device),
                                       destination_state_is_temporary=False)
    out.append(state)
    out.append(m.CNNBatchNormalization(device, bn_source()).result_state(image(rng("x"), device)))
    _, state = m.CNNConcatenation(device, 2).encode(cb, [image(rng("x"), device), image(rng("y"), device)],
                                                    destination_state_is_temporary=False)
    out.append(state)
    cb.commit()
    cb.wait_until_completed()
    return out


def test_every_state_class_has_a_rule(device):
    """Every State class is serializable (states() covers it) or a gradient state that refuses."""
    classes = {n for n, c in vars(m._mpsgrad).items() if isinstance(c, type) and issubclass(c, m.State)}
    serializable = {type(s).__name__ for s in states(device)}
    refusing = {type(s).__name__ for s in gradient_states(device) + image_holding_states(device)}
    bases = {"NNGradientState", "NNBinaryGradientState"}  # the abstract gradient-state classes
    assert classes - serializable - refusing - bases == set(), "State classes without a rule"
    for state in image_holding_states(device):
        with pytest.raises(TypeError, match="not serializable"):
            state.to_bytes()
    for state in gradient_states(device):
        assert isinstance(state, (m.NNGradientState, m.NNBinaryGradientState, m.NNMultiaryGradientState))
        with pytest.raises(TypeError, match="gradient state"):
            state.to_bytes()
        for protocol in PROTOCOLS:
            with pytest.raises(TypeError, match="gradient state"):
                pickle.dumps(state, protocol=protocol)


def test_not_serializable(device):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    with pytest.raises(ValueError, match="temporary"):
        m.State.temporary(cb, [16]).to_bytes()
    neuron = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    _, state = neuron.encode(cb, image(rng("x"), device), destination_state_is_temporary=False)
    cb.commit()
    cb.wait_until_completed()
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match="gradient state"):
            pickle.dumps(state, protocol=protocol)
        for obj in (image(rng("x"), device), q, q.command_buffer()):
            with pytest.raises(TypeError, match="cannot pickle"):
                pickle.dumps(obj, protocol=protocol)
    # A Vector is GPU data like an Image (save vector.to_numpy()); CNNLossLabels holds images.
    labels = m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 1), np.float32)))
    with pytest.raises(TypeError, match="CNNLossLabels is not serializable"):
        labels.to_bytes()
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match="cannot pickle"):
            pickle.dumps(m.Vector(device, 4), protocol=protocol)
        with pytest.raises(TypeError, match="CNNLossLabels"):
            pickle.dumps(labels, protocol=protocol)
