"""Ports of public MPS training programs, written as a new user would write them from the MPS
sources and mpsgrad's docs, with the MPS names translated by the naming rule and no workaround
(issue 29). Each trains for a few dozen steps and must learn: the training loss falls and the
held-out accuracy reaches a level only a working training loop reaches. The data are scikit-learn's
8x8 digits (MNIST is not available offline), placed in 28x28 images where the program reads MNIST.

1. **Apple's sample "Training a Neural Network with Metal Performance Shaders"**
   (MNISTClassifierGraph, ConvDataSource, main): conv 5x5 SAME -> ReLU -> max pool 2 -> conv 5x5 SAME
   -> ReLU -> max pool 2 -> fully connected 7x7 -> ReLU -> dropout 0.5 -> fully connected 1x1 ->
   softmax cross-entropy (SUM, weight 1/batch). What it uses: data sources that update with
   NNOptimizerAdam on the command buffer, their weights and biases in Vectors wrapped by
   CNNConvolutionWeightsAndBiasesState(weights=, biases=); labels of 12 channels for 10 classes
   (a buffer rounded up to a multiple of 4); UNORM8 input images written with write_bytes; a node
   handler that makes every gradient result FLOAT32; image_batch_synchronize; the loss read from
   the labels' loss images in a completed handler; an inference graph sharing the data sources,
   refreshed by reload_from_data_sources. The sample's channel counts (32, 64, 1024) are divided
   by 4 to keep CI fast; everything else is the sample's.
2. **A hand-wired classifier** (the kernels, no graph), as in the public MPSTrainingChallenge
   program: a fully connected layer 28x28x1 -> 10, softmax cross-entropy, the fully connected
   gradient kernel and NNOptimizerStochasticGradientDescent updating the weights state in place.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m

sklearn_datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture
def device(device):
    """The ports train for dozens of steps: on the CPU device. The emulated Metal device runs every
    GPU thread on the host (with CI's race check, minutes per step); the kernels these programs use
    are checked on metal by their families' tests."""
    if device.name != "cpu":
        pytest.skip("training runs: cpu only (the emulated Metal device is too slow for them)")
    return device

MNIST_SIZE = 28
BATCH_SIZE = 40
LABEL_CHANNELS = 12  # Apple's sample: "the closest multiple of 4 greater than 10"


def _digits():
    """(uint8 images N x 28 x 28, labels) with the 8x8 digits scaled x3 into the centre."""
    digits = sklearn_datasets.load_digits()
    small = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    big = np.zeros((len(small), MNIST_SIZE, MNIST_SIZE), np.uint8)
    big[:, 2:26, 2:26] = small.repeat(3, axis=1).repeat(3, axis=2)
    return big, digits.target.astype(np.int64)


def _input_images(device, pixels, channel_format=m.ImageFeatureChannelFormat.UNORM8):
    """28x28x1 images written with write_bytes: UNORM8 codes as Apple's sample writes its MNIST
    batches, or FLOAT32 values in [0, 1]."""
    descriptor = m.ImageDescriptor(width=MNIST_SIZE, height=MNIST_SIZE, feature_channels=1,
                                   channel_format=channel_format)
    batch = []
    for p in pixels:
        image = m.Image(device, descriptor)
        data = np.ascontiguousarray(p.reshape(MNIST_SIZE, MNIST_SIZE, 1))
        image.write_bytes(data if channel_format == m.ImageFeatureChannelFormat.UNORM8
                          else data.astype(np.float32) / 255.0)
        batch.append(image)
    return batch


def _loss_labels(device, digit):
    labels = np.zeros((1, 1, LABEL_CHANNELS), np.float32)
    labels[0, 0, digit] = 1.0
    return m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels, m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS,
                                                           (1, 1, LABEL_CHANNELS)))


# ---- 1. Apple's MNIST sample -------------------------------------------------------------------------


class ConvDataSource:
    """The sample's ConvDataSource: weights uniform in [-0.2, 0.2], biases 0.1, Adam with its
    moments in Vectors, the weights and biases in Vectors that a CNNConvolutionWeightsAndBiasesState
    wraps (initWithWeights:biases:); update_with_command_buffer encodes the Adam step into it."""

    def __init__(self, device, kernel_width, kernel_height, input_channels, output_channels, stride, label,
                 learning_rate, seed):
        self._label = label
        self.conv_desc = m.CNNConvolutionDescriptor(kernel_width, kernel_height, input_channels, output_channels)
        self.conv_desc.stride_in_pixels_x = self.conv_desc.stride_in_pixels_y = stride
        weights = kernel_width * kernel_height * input_channels * output_channels
        rng = np.random.default_rng(seed)
        self.weight_vector = m.Vector(device, weights)
        self.bias_vector = m.Vector(device, output_channels)
        self.weight_vector.numpy()[:] = rng.uniform(-0.2, 0.2, weights).astype(np.float32)
        self.bias_vector.numpy()[:] = 0.1
        self.momentum = [m.Vector(device, weights), m.Vector(device, output_channels)]
        self.velocity = [m.Vector(device, weights), m.Vector(device, output_channels)]
        self.updater = m.NNOptimizerAdam(device, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-8, time_step=0)
        self.conv_wts_and_bias = m.CNNConvolutionWeightsAndBiasesState(weights=self.weight_vector,
                                                                      biases=self.bias_vector)
        self.t = 0

    def data_type(self):
        return m.DataType.FLOAT32

    def descriptor(self):
        return self.conv_desc

    def weights(self):
        return self.weight_vector.numpy()

    def bias_terms(self):
        return self.bias_vector.numpy()

    def load(self):
        return True

    def purge(self):
        pass

    def label(self):
        return self._label

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.t += 1
        self.updater.encode(command_buffer, gradient_state, source_state, self.momentum, self.velocity, None,
                            self.conv_wts_and_bias)
        assert self.t == self.updater.time_step
        return self.conv_wts_and_bias


class MNISTClassifierGraph:
    def __init__(self, device, scale=4, learning_rate=1e-3):
        c1, c2, f1 = 32 // scale, 64 // scale, 1024 // scale
        self.device = device
        self.conv1_wts = ConvDataSource(device, 5, 5, 1, c1, 1, "conv1", learning_rate, 1)
        self.conv2_wts = ConvDataSource(device, 5, 5, c1, c2, 1, "conv2", learning_rate, 2)
        self.fc1_wts = ConvDataSource(device, 7, 7, c2, f1, 1, "fc1", learning_rate, 3)
        self.fc2_wts = ConvDataSource(device, 1, 1, f1, 10, 1, "fc2", learning_rate, 4)
        self.same_padding = m.NNDefaultPadding.padding_with_method(
            m.PaddingMethod.ADD_REMAINDER_TO_TOP_LEFT | m.PaddingMethod.ALIGN_CENTERED | m.PaddingMethod.SIZE_SAME)

        final_node = self.create_nodes(training=True)

        def node_handler(gradient_node, inference_node, inference_source, gradient_source):
            # The sample keeps the gradients in float32 (small values would flush to 0 in half).
            gradient_node.result_image.format = m.ImageFeatureChannelFormat.FLOAT32

        loss_exit_points = final_node.training_graph(None, node_handler)
        assert len(loss_exit_points) == 1
        self.training_graph = m.NNGraph(device, loss_exit_points[0].result_image, True)
        self.training_graph.format = m.ImageFeatureChannelFormat.FLOAT16
        self.inference_graph = m.NNGraph(device, self.create_nodes(training=False).result_image, True)
        self.inference_graph.format = m.ImageFeatureChannelFormat.FLOAT16

    def create_nodes(self, training):
        conv1 = m.CNNConvolutionNode(m.NNImageNode(None), self.conv1_wts)
        conv1.padding_policy = self.same_padding
        relu1 = m.CNNNeuronReLUNode(conv1.result_image, 0.0)
        pool1 = m.CNNPoolingMaxNode(relu1.result_image, 2, 2)
        pool1.padding_policy = self.same_padding
        conv2 = m.CNNConvolutionNode(pool1.result_image, self.conv2_wts)
        conv2.padding_policy = self.same_padding
        relu2 = m.CNNNeuronReLUNode(conv2.result_image, 0.0)
        pool2 = m.CNNPoolingMaxNode(relu2.result_image, 2, 2)
        pool2.padding_policy = self.same_padding
        fc1 = m.CNNFullyConnectedNode(pool2.result_image, self.fc1_wts)
        relu3 = m.CNNNeuronReLUNode(fc1.result_image, 0.0)
        fc2_input = relu3
        if training:
            fc2_input = m.CNNDropoutNode(relu3.result_image, 0.5, 1, (1, 1, 1))
        fc2 = m.CNNFullyConnectedNode(fc2_input.result_image, self.fc2_wts)
        if training:
            loss_desc = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM)
            loss_desc.weight = 1.0 / BATCH_SIZE
            return m.CNNLossNode(fc2.result_image, loss_desc)
        return m.CNNSoftMaxNode(fc2.result_image)

    def encode_training_batch(self, command_buffer, source_images, loss_states):
        return_images = self.training_graph.encode_batch(command_buffer, [source_images], [loss_states])
        m.image_batch_synchronize(return_images, command_buffer)
        return return_images

    def encode_inference_batch(self, command_buffer, source_images):
        return self.inference_graph.encode_batch(command_buffer, [source_images])


def test_apple_mnist_sample_trains(device):
    pixels, labels = _digits()
    train, test = np.arange(0, 1500), np.arange(1500, len(labels))
    queue = m.CommandQueue(device)
    classifier = MNISTClassifierGraph(device)
    rng = np.random.default_rng(0)
    losses = []

    def training_iteration():
        pick = rng.choice(train, BATCH_SIZE, replace=False)
        batch = _input_images(device, pixels[pick])
        loss_states = [_loss_labels(device, d) for d in labels[pick]]
        cb = queue.command_buffer()
        classifier.encode_training_batch(cb, batch, loss_states)
        output_batch = [s.loss_image for s in loss_states]
        m.image_batch_synchronize(output_batch, cb)

        def completed(done):
            assert done.error is None, done.error
            # lossReduceSumAcrossBatch: each image holds its share (weight 1/batch).
            losses.append(sum(float(i.read_bytes(m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS).item())
                              for i in output_batch))

        cb.add_completed_handler(completed)
        cb.commit()
        return cb

    def evaluate_test_set():
        classifier.inference_graph.reload_from_data_sources()
        correct = 0
        for start in range(0, len(test), BATCH_SIZE):
            idx = test[start:start + BATCH_SIZE]
            cb = queue.command_buffer()
            outputs = classifier.encode_inference_batch(cb, _input_images(device, pixels[idx]))
            m.image_batch_synchronize(outputs, cb)
            cb.commit()
            cb.wait_until_completed()
            predictions = [int(np.argmax(o.to_numpy().reshape(-1)[:10])) for o in outputs]
            correct += int(np.sum(np.array(predictions) == labels[idx]))
        return correct / len(test)

    before = evaluate_test_set()
    latest = None
    for _ in range(60):
        latest = training_iteration()
    latest.wait_until_completed()
    after = evaluate_test_set()
    assert len(losses) == 60
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), losses
    assert before < 0.3 and after > 0.8, (before, after)


# ---- 2. a hand-wired classifier with the kernels ------------------------------------------------------


FLOAT32 = m.ImageFeatureChannelFormat.FLOAT32  # the kernels' results take their source's format


def test_hand_wired_fully_connected_softmax_sgd_trains(device):
    pixels, labels = _digits()
    train, test = np.arange(0, 1500), np.arange(1500, len(labels))
    queue = m.CommandQueue(device)
    rng = np.random.default_rng(1)
    desc = m.CNNConvolutionDescriptor(MNIST_SIZE, MNIST_SIZE, 1, 10)
    weights = (rng.standard_normal((10, MNIST_SIZE, MNIST_SIZE, 1)) * 0.01).astype(np.float32)
    source = m.CNNConvolutionWeightsDataSource(desc, weights, np.zeros(10, np.float32))
    fc = m.CNNFullyConnected(device, source)
    fc_gradient = m.CNNFullyConnectedGradient(device, source)
    fc_gradient.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
    loss_desc = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
    loss_desc.reduce_across_batch = True
    loss = m.CNNLoss(device, loss_desc)
    sgd = m.NNOptimizerStochasticGradientDescent(device, 0.5)
    weight_vector, bias_vector = m.Vector(device, weights.size), m.Vector(device, 10)
    weight_vector.numpy()[:] = weights.reshape(-1)
    state = m.CNNConvolutionWeightsAndBiasesState(weights=weight_vector, biases=bias_vector, descriptor=desc)
    losses = []
    for _ in range(40):
        pick = rng.choice(train, BATCH_SIZE, replace=False)
        batch = _input_images(device, pixels[pick], FLOAT32)
        loss_states = [_loss_labels(device, d) for d in labels[pick]]
        cb = queue.command_buffer()
        fc.reload_weights_and_biases_with_command_buffer(cb, state)
        fc_gradient.reload_weights_and_biases_with_command_buffer(cb, state)
        logits, gradient_states = fc.encode_batch(cb, batch, destination_state_is_temporary=False)
        dy = loss.encode_batch(cb, logits, loss_states)
        fc_gradient.encode_batch(cb, dy, batch, gradient_states)
        sgd.encode(cb, gradient_states[0], state, None, state)
        cb.commit()
        cb.wait_until_completed()
        assert cb.error is None, cb.error
        losses.append(float(loss_states[0].loss_image.to_numpy().item()))
    correct = 0
    for start in range(0, len(test), BATCH_SIZE):
        idx = test[start:start + BATCH_SIZE]
        cb = queue.command_buffer()
        fc.reload_weights_and_biases_with_command_buffer(cb, state)
        fc.destination_image_allocator = m.ImageAllocator.persistent()
        outputs = fc.encode_batch(cb, _input_images(device, pixels[idx], FLOAT32))
        cb.commit()
        cb.wait_until_completed()
        predictions = np.array([int(np.argmax(o.to_numpy().reshape(-1)[:10])) for o in outputs])
        correct += int(np.sum(predictions == labels[idx]))
    assert np.mean(losses[-5:]) < 0.5 * losses[0], losses
    assert correct / len(test) > 0.8, correct / len(test)
