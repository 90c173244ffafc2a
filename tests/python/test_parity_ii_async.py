"""Issue 29 (MPS parity II), items 8, 12 and 14.

8. **Host reads follow Metal's asynchronous model** (docs/user_guide.md, "Reading results"). A host
   read of an image or state (to_numpy, read_bytes, DLPack export, __array__, state buffer views)
   that a kernel of a command buffer that has not completed writes is a CommandBufferError naming the
   command buffer (its label) and its status; once it completed (or failed) the read works. An image
   that only the host wrote, or that pending work only reads, is always readable. A host callback
   may read what the work encoded before it wrote. A temporary image or state cannot be read once
   its command buffer completed (ValueError): MPS releases its storage then.
   Oracle: the rule itself; the values read after the wait are checked against NumPy (ReLU).
12. **The batch helpers of MPSImage.h / MPSState.h**, MPSStateResourceList and MPSSupportsMTLDevice,
   with the semantics written in docs/user_guide.md: every helper touches each distinct object of a
   batch once, in the order of its first appearance.
14. **Unknown keyword arguments** to any bound constructor, method or function are a TypeError of one
   line naming the keyword and the accepted ones (pybind11's own message lists every overload and
   the repr of every argument).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import mpsgrad as m

# ---- helpers -------------------------------------------------------------------------------------


def _relu(device, persistent=True):
    relu = m.CNNNeuronReLU(device)
    if persistent:
        relu.destination_image_allocator = m.ImageAllocator.persistent()
    return relu


def _source(device, shape=(3, 5, 4), seed=0):
    values = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return values, m.Image.from_numpy(values, device)


# Every host read of an image, by name: the name each one reports in its error.
READS = {
    "to_numpy": lambda image: image.to_numpy(),
    "read_bytes": lambda image: image.read_bytes(),
    "DLPack export": lambda image: np.from_dlpack(image),
    "__array__": lambda image: np.asarray(image),
}
READ_NAMES = {"to_numpy": "to_numpy", "read_bytes": "read_bytes", "DLPack export": "DLPack export",
              "__array__": "to_numpy"}


def _blocked_command_buffer(queue, label):
    """A command buffer whose work waits on the returned event (set it before waiting), so its
    status stays COMMITTED while the test reads."""
    cb = queue.command_buffer()
    cb.label = label
    gate = threading.Event()
    cb.encode_host_callback(lambda: gate.wait(30))
    return cb, gate


# ---- item 8: reads of pending results --------------------------------------------------------------


@pytest.mark.parametrize("read", sorted(READS))
def test_reading_a_result_before_commit_names_the_command_buffer(device, queue, read):
    values, x = _source(device)
    cb = queue.command_buffer()
    cb.label = "forward pass"
    y = _relu(device).encode(cb, x)
    with pytest.raises(m.CommandBufferError, match=r"command buffer 'forward pass'.*not been committed") as e:
        READS[read](y)
    assert str(e.value).startswith(READ_NAMES[read] + ":")
    assert "\n" not in str(e.value)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy()[0], np.maximum(values, 0))


@pytest.mark.parametrize("read", sorted(READS))
def test_reading_a_result_after_commit_before_completion_raises(device, queue, read):
    values, x = _source(device)
    cb, gate = _blocked_command_buffer(queue, "train step 7")
    y = _relu(device).encode(cb, x)
    cb.commit()
    try:
        with pytest.raises(m.CommandBufferError, match=r"'train step 7'.*has not completed \(status COMMITTED\)"):
            READS[read](y)
    finally:
        gate.set()
    cb.wait_until_completed()
    np.testing.assert_array_equal(np.asarray(READS[read](y)).reshape(values.shape), np.maximum(values, 0))


def test_an_unlabeled_command_buffer_is_described(device, queue):
    _, x = _source(device)
    cb = queue.command_buffer()
    y = _relu(device).encode(cb, x)
    with pytest.raises(m.CommandBufferError, match="without a label"):
        y.to_numpy()
    cb.commit()
    cb.wait_until_completed()


def test_images_only_the_host_wrote_or_pending_work_only_reads_stay_readable(device, queue):
    values, x = _source(device)
    fresh = m.Image(device, m.ImageDescriptor(width=5, height=3, feature_channels=4))
    fresh.write_bytes(values)
    cb, gate = _blocked_command_buffer(queue, "reads x")
    relu = _relu(device)
    y = relu.encode(cb, x)  # x is only read by the pending work
    cb.commit()
    try:
        np.testing.assert_array_equal(x.to_numpy()[0], values)
        np.testing.assert_array_equal(np.from_dlpack(x)[0], values)
        np.testing.assert_array_equal(fresh.read_bytes(), values)
    finally:
        gate.set()
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy()[0], np.maximum(values, 0))


def test_a_destination_passed_in_is_pending_too_and_so_are_its_views(device, queue):
    values = np.random.default_rng(1).normal(size=(2, 3, 5, 8)).astype(np.float32)
    x = m.Image.from_numpy(values, device)
    out = m.Image(device, m.ImageDescriptor(width=5, height=3, feature_channels=8, number_of_images=2))
    views = [out.sub_image_with_feature_channel_range(4, 4)] + list(out.batch_representation())
    assert out.to_numpy().shape == (2, 3, 5, 8)  # readable before any kernel writes it
    cb = queue.command_buffer()
    cb.label = "into out"
    _relu(device).encode(cb, x, destination_image=out)
    for image in [out] + views:
        with pytest.raises(m.CommandBufferError, match="'into out'"):
            image.to_numpy()
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(out.to_numpy(), np.maximum(values, 0))
    np.testing.assert_array_equal(views[0].to_numpy(), np.maximum(values, 0)[..., 4:])


def test_a_batch_member_written_elsewhere_does_not_block_its_neighbours(device, queue):
    # The images of batch_from_numpy share one allocation; the rule is per image.
    values = np.random.default_rng(2).normal(size=(3, 2, 2, 4)).astype(np.float32)
    batch = m.batch_from_numpy(values, device)
    cb = queue.command_buffer()
    _relu(device).encode(cb, batch[0], destination_image=batch[1])  # writes batch[1] only
    np.testing.assert_array_equal(batch[2].to_numpy()[0], values[2])
    np.testing.assert_array_equal(batch[0].to_numpy()[0], values[0])
    with pytest.raises(m.CommandBufferError):
        batch[1].to_numpy()
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(batch[1].to_numpy()[0], np.maximum(values[0], 0))


def test_a_completed_handler_reads_the_results(device, queue):
    values, x = _source(device)
    cb = queue.command_buffer()
    y = _relu(device).encode(cb, x)
    seen = []
    cb.add_completed_handler(lambda done: seen.append(y.to_numpy()))
    cb.commit()
    cb.wait_until_completed()
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0][0], np.maximum(values, 0))


def test_a_host_callback_reads_its_own_buffer_but_not_other_pending_work(device, queue):
    values, x = _source(device)
    relu = _relu(device)
    other = queue.command_buffer()
    other.label = "not committed"
    w = relu.encode(other, x)
    cb = queue.command_buffer()
    y = relu.encode(cb, x)
    z = m.Image(device, m.ImageDescriptor(width=5, height=3, feature_channels=4))
    seen, errors = [], []

    def host_point():
        seen.append(y.to_numpy())  # written by the work before the callback: done
        seen.append(z.to_numpy())  # written by the work after it, which has not started
        try:
            w.to_numpy()  # another command buffer's pending write
        except m.CommandBufferError as error:
            errors.append(str(error))

    cb.encode_host_callback(host_point)
    relu.encode(cb, y, destination_image=z)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(seen[0][0], np.maximum(values, 0))
    np.testing.assert_array_equal(seen[1][0], np.zeros_like(values))
    assert len(errors) == 1 and "'not committed'" in errors[0] and "NOT_ENQUEUED" in errors[0]
    np.testing.assert_array_equal(z.to_numpy()[0], np.maximum(values, 0))
    with pytest.raises(m.CommandBufferError, match="'not committed'"):
        w.to_numpy()  # outside the callback as well
    del other


def test_a_failed_command_buffer_no_longer_blocks_reads(device, queue):
    _, x = _source(device)
    cb = queue.command_buffer()
    y = _relu(device).encode(cb, x)
    cb.fail_on_commit("injected")
    cb.commit()
    with pytest.raises(m.CommandBufferError, match="injected"):
        cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.ERROR
    assert y.to_numpy().shape == (1, 3, 5, 4)  # the contents are undefined, but the read is allowed


def test_a_dropped_uncommitted_command_buffer_no_longer_blocks_reads(device, queue):
    _, x = _source(device)
    cb = queue.command_buffer()
    y = _relu(device).encode(cb, x)
    with pytest.raises(m.CommandBufferError):
        y.to_numpy()
    del cb  # never committed: its work will never run
    assert y.to_numpy().shape == (1, 3, 5, 4)


def test_a_state_written_by_pending_work_is_not_readable(device, queue):
    rng = np.random.default_rng(3)
    desc = m.CNNConvolutionDescriptor(kernel_width=1, kernel_height=1, input_feature_channels=4,
                                      output_feature_channels=4)
    ds = m.CNNConvolutionWeightsDataSource(desc, rng.normal(size=(4, 1, 1, 4)).astype(np.float32),
                                           np.zeros(4, np.float32))
    conv, grad = m.CNNConvolution(device, ds), m.CNNConvolutionGradient(device, ds)
    for kernel in (conv, grad):
        kernel.destination_image_allocator = m.ImageAllocator.persistent()
    _, x = _source(device)
    state = conv.result_state(x)
    before = state.gradient_for_weights.copy()  # nothing pending yet
    cb = queue.command_buffer()
    cb.label = "backward"
    y = conv.encode(cb, x, state, m.Image(device, conv.destination_image_descriptor([x])))
    grad.encode(cb, y, x, state)
    with pytest.raises(m.CommandBufferError, match="'backward'.*writes this state"):
        state.gradient_for_weights
    cb.commit()
    cb.wait_until_completed()
    assert state.gradient_for_weights.shape == before.shape
    assert not np.array_equal(state.gradient_for_weights, before)


def test_weights_an_optimizer_updates_are_pending_until_completion(device, queue):
    rng = np.random.default_rng(4)
    desc = m.CNNConvolutionDescriptor(kernel_width=1, kernel_height=1, input_feature_channels=4,
                                      output_feature_channels=4)
    w = rng.normal(size=(4, 1, 1, 4)).astype(np.float32)
    ds = m.CNNConvolutionWeightsDataSource(desc, w, np.zeros(4, np.float32))
    conv, grad = m.CNNConvolution(device, ds), m.CNNConvolutionGradient(device, ds)
    for kernel in (conv, grad):
        kernel.destination_image_allocator = m.ImageAllocator.persistent()
    weights = m.CNNConvolutionWeightsAndBiasesState(device, desc)
    weights.weights[...] = w
    _, x = _source(device)
    state = conv.result_state(x)
    cb = queue.command_buffer()
    cb.label = "sgd step"
    y = conv.encode(cb, x, state, m.Image(device, conv.destination_image_descriptor([x])))
    grad.encode(cb, y, x, state)
    m.NNOptimizerStochasticGradientDescent(device, 0.1).encode(cb, state, weights)
    for read in (lambda: weights.weights, lambda: weights.to_bytes()):
        with pytest.raises(m.CommandBufferError, match="'sgd step'.*writes this state"):
            read()
    cb.commit()
    cb.wait_until_completed()
    assert not np.array_equal(weights.weights, w)  # updated, and readable
    assert m.State.from_bytes(weights.to_bytes(), device) is not None


# ---- item 8: temporary images and states ------------------------------------------------------------


def test_a_temporary_result_is_not_readable_after_its_command_buffer_completed(device, queue):
    values, x = _source(device)
    cb = queue.command_buffer()
    cb.label = "temporaries"
    t = _relu(device, persistent=False).encode(cb, x)
    assert t.is_temporary
    seen = []
    cb.encode_host_callback(lambda: seen.append(t.to_numpy()))  # still alive here
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(seen[0][0], np.maximum(values, 0))
    for read in READS.values():
        with pytest.raises(ValueError, match=r"temporary image lived on command buffer 'temporaries', which has "
                                             r"completed"):
            read(t)
    sub = t.sub_image_with_feature_channel_range(0, 4)
    with pytest.raises(ValueError, match="temporary image"):
        sub.to_numpy()


def test_a_temporary_image_is_readable_while_its_command_buffer_is_pending(device, queue):
    cb = queue.command_buffer()
    t = m.TemporaryImage(cb, m.ImageDescriptor(width=2, height=2, feature_channels=4))
    values = np.arange(16, dtype=np.float32).reshape(2, 2, 4)
    t.write_bytes(values)
    np.testing.assert_array_equal(t.to_numpy()[0], values)
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(ValueError, match="exists only until its command buffer completes"):
        t.read_bytes()


def test_a_temporary_state_is_not_readable_after_its_command_buffer_completed(device, queue):
    cb = queue.command_buffer()
    cb.label = "state owner"
    t = m.State.temporary(cb, [16])
    assert t.buffer_at_index(0).shape == (4,)
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(ValueError, match="temporary state lived on command buffer 'state owner'"):
        t.buffer_at_index(0)
    persistent = m.State(device, 16)
    assert persistent.buffer_at_index(0).shape == (4,)


# ---- item 12: batch helpers ------------------------------------------------------------------------


def _images(device, count, channels=4):
    desc = m.ImageDescriptor(width=3, height=2, feature_channels=channels)
    return [m.Image(device, desc) for _ in range(count)]


def test_image_batch_increment_read_count_counts_each_image_once(device, queue):
    cb = queue.command_buffer()
    desc = m.ImageDescriptor(width=2, height=2, feature_channels=4)
    a, b = m.TemporaryImage(cb, desc), m.TemporaryImage(cb, desc)
    persistent = m.Image(device, desc)
    assert m.image_batch_increment_read_count([a, b, a, persistent, a], 3) == 3
    assert (a.read_count, b.read_count) == (4, 4)
    assert m.image_batch_increment_read_count([a, a], -2) == 1
    assert a.read_count == 2
    assert m.image_batch_increment_read_count([], 5) == 0


def test_image_batch_resource_size_counts_each_image_once(device):
    a, b = _images(device, 2)
    c = _images(device, 1, channels=8)[0]
    assert m.image_batch_resource_size([a, a, b, c, b]) == a.resource_size + b.resource_size + c.resource_size
    assert m.image_batch_resource_size([c]) == 2 * a.resource_size
    assert m.image_batch_resource_size([]) == 0


def test_image_batch_iterate_visits_distinct_images_in_order(device):
    a, b, c = _images(device, 3)
    calls = []
    assert m.image_batch_iterate([a, b, a, c, b], lambda image, index: calls.append((image, index)) or 7) == 7
    assert [(image is expected, index) for (image, index), expected in zip(calls, [a, b, c])] == \
        [(True, 0), (True, 1), (True, 3)]


def test_image_batch_iterate_stops_at_a_negative_value(device):
    a, b, c = _images(device, 3)
    calls = []

    def visit(image, index):
        calls.append(index)
        return -5 if index == 1 else index

    assert m.image_batch_iterate([a, b, c], visit) == -5
    assert calls == [0, 1]
    assert m.image_batch_iterate([], visit) == 0


def test_image_batch_iterate_checks_the_iterator(device):
    a, = _images(device, 1)
    with pytest.raises(TypeError, match="iterator: the returned value: expected an int"):
        m.image_batch_iterate([a], lambda image, index: "go on")
    with pytest.raises(TypeError, match="iterator: expected a callable"):
        m.image_batch_iterate([a], 3)

    def boom(image, index):
        raise KeyError("from the iterator")

    with pytest.raises(KeyError, match="from the iterator"):
        m.image_batch_iterate([a], boom)


def test_image_batch_synchronize_checks_each_image(device, queue):
    a, b = _images(device, 2)
    cb = queue.command_buffer()
    assert m.image_batch_synchronize([a, b, a], cb) is None
    other = queue.command_buffer()
    t = m.TemporaryImage(other, m.ImageDescriptor(width=2, height=2, feature_channels=4))
    with pytest.raises(ValueError, match="valid only on the command buffer"):
        m.image_batch_synchronize([a, t], cb)
    with pytest.raises(TypeError, match="batch: expected a list of Image"):
        m.image_batch_synchronize([a, "b"], cb)


def test_state_batch_helpers(device, queue):
    s = m.State(device, 64)
    t = m.State(device, resource_list=m.StateResourceList([16, 32]))
    assert m.state_batch_resource_size([s, t, s, t]) == 64 + 48
    assert m.state_batch_resource_size([]) == 0
    cb = queue.command_buffer()
    assert m.state_batch_synchronize([s, s, t], cb) is None
    other = queue.command_buffer()
    foreign = m.State.temporary(other, [16])
    with pytest.raises(ValueError, match="valid only on the command buffer"):
        m.state_batch_synchronize([s, foreign], cb)
    temp = m.State.temporary(cb, [16])
    assert m.state_batch_increment_read_count([temp, temp, s], 2) == 2
    assert temp.read_count == 3


def test_state_resource_list(device, queue):
    empty = m.StateResourceList()
    assert len(empty) == 0 and empty.buffer_sizes == []
    sizes = m.StateResourceList([8, 24])
    sizes.append_buffer(40)
    assert sizes.buffer_sizes == [8, 24, 40] and len(sizes) == 3
    assert repr(sizes) == "StateResourceList(buffer_sizes=[8, 24, 40])"
    state = m.State(device, resource_list=sizes)
    assert state.resource_count == 3 and state.resource_size == 72 and not state.is_temporary
    assert [state.buffer_size_at_index(i) for i in range(3)] == [8, 24, 40]
    cb = queue.command_buffer()
    temp = m.State.temporary(cb, resource_list=sizes)
    assert temp.is_temporary and temp.resource_size == 72
    with pytest.raises(ValueError, match="must be > 0"):
        sizes.append_buffer(0)
    with pytest.raises(ValueError, match="must be > 0"):
        m.StateResourceList([4, 0])
    with pytest.raises(ValueError, match="either buffer_size or resource_list"):
        m.State(device, 16, resource_list=sizes)
    with pytest.raises(ValueError, match="either buffer_sizes or resource_list"):
        m.State.temporary(cb, [16], resource_list=sizes)
    with pytest.raises(TypeError, match="resource_list: expected a StateResourceList"):
        m.State(device, resource_list=[16])
    with pytest.raises(TypeError, match="buffer_sizes: expected a list of int"):
        m.StateResourceList("16")
    assert m.State(device, resource_list=empty).resource_count == 0


def test_supports_mtl_device(device):
    assert m.supports_mtl_device(device) is True
    assert m.supports_mtl_device(None) is False
    with pytest.raises(TypeError, match="device: expected a Device or None"):
        m.supports_mtl_device("cpu")


# ---- item 14: unknown keyword arguments -------------------------------------------------------------


def _one_line_naming(error, keyword, accepted):
    text = str(error.value)
    assert "\n" not in text and len(text) < 400, text
    assert f"unexpected keyword argument '{keyword}'" in text, text
    for name in accepted:
        assert name in text, text
    assert "incompatible" not in text and "Invoked with" not in text


def test_unknown_keyword_to_a_constructor(device):
    with pytest.raises(TypeError) as e:
        m.CNNConvolutionDescriptor(kernel_widht=3, kernel_height=3, input_feature_channels=4,
                                   output_feature_channels=4)
    _one_line_naming(e, "kernel_widht", ["kernel_width", "kernel_height", "input_feature_channels"])
    assert str(e.value).startswith("CNNConvolutionDescriptor() ")
    with pytest.raises(TypeError) as e:
        m.ImageDescriptor(width=2, chanels=4)
    _one_line_naming(e, "chanels", ["width", "height", "feature_channels", "channel_format"])


def test_unknown_keyword_to_methods_and_functions(device, queue):
    big = m.Image.from_numpy(np.zeros((64, 64, 16), np.float32), device)  # its repr must not be dumped
    with pytest.raises(TypeError) as e:
        big.read_bytes(layout=m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS)
    _one_line_naming(e, "layout", ["data_layout", "image_index", "feature_channel_offset"])
    assert str(e.value).startswith("Image.read_bytes() ")
    relu = m.CNNNeuronReLU(device)
    cb = queue.command_buffer()
    with pytest.raises(TypeError) as e:
        relu.encode(cb, big, destination=big)
    _one_line_naming(e, "destination", ["command_buffer", "source_image", "destination_image"])
    with pytest.raises(TypeError) as e:
        m.Vector.from_numpy(np.zeros(4, np.float32), devcie=device)  # a static method (not the float16
    _one_line_naming(e, "devcie", ["array", "device"])                 # pass's Image.from_numpy stand-in)
    with pytest.raises(TypeError) as e:
        m.State.from_bytes(m.State(device, 16).to_bytes(), devcie=device)  # a class method
    _one_line_naming(e, "devcie", ["data", "device"])
    assert str(e.value).startswith("State.from_bytes() ")
    with pytest.raises(TypeError) as e:
        m.image_batch_resource_size(images=[big])
    _one_line_naming(e, "images", ["batch"])
    assert str(e.value).startswith("image_batch_resource_size() ")


def test_known_keywords_of_the_wrong_type_keep_their_message(device):
    # Only the unknown-keyword case is rewritten: a wrong value for a known keyword still says what was wrong.
    with pytest.raises(TypeError) as e:
        m.ImageDescriptor(width="wide")
    assert "unexpected keyword" not in str(e.value)


def _public_classes():
    for name in sorted(dir(m._mpsgrad)):
        value = getattr(m, name, None)
        if isinstance(value, type) and not name.startswith("_") and not hasattr(value, "__members__"):
            yield name, value


def test_every_constructor_names_an_unknown_keyword():
    checked = 0
    for name, cls in _public_classes():
        if issubclass(cls, BaseException):
            continue
        with pytest.raises(TypeError) as e:
            cls(zz_not_a_parameter=1)
        text = str(e.value)
        if "No constructor defined" in text or "cannot be instantiated" in text:
            continue  # abstract classes: nothing to name
        assert "incompatible" not in text and "Invoked with" not in text, f"{name}: {text[:300]}"
        assert "zz_not_a_parameter" in text and "\n" not in text, f"{name}: {text[:300]}"
        checked += 1
    assert checked > 100
