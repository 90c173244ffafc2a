#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <stdexcept>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "backend/binding_checks.h"
#include "backend/cpu/buffer_cache.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/parallel.h"
#include "core/command_buffer.h"
#include "core/profiler.h"

namespace mpsgrad {
namespace {

constexpr size_t kAlignment = 64;

class CpuBuffer final : public Buffer {
public:
    CpuBuffer(size_t bytes, BufferFill fill) : length_(bytes) {
        if (bytes > size_t(PTRDIFF_MAX) - kAlignment) throw std::bad_alloc();  // rounding up would wrap
        const size_t block = blockBytes(bytes);
        data_ = cpu::buffer_cache::take(block);  // resident pages of a freed buffer (buffer_cache.h)
        if (!data_) data_ = std::aligned_alloc(kAlignment, block);
        if (!data_) throw std::bad_alloc();
        if (fill == BufferFill::Zero) zeroFill(static_cast<char*>(data_), block);
        else prepareUnspecifiedBuffer(data_, block);
    }
    ~CpuBuffer() override { cpu::buffer_cache::give(data_, blockBytes(length_)); }
    void* contents() override { return data_; }
    size_t length() const override { return length_; }

private:
    // Bytes of the block behind a buffer of `bytes` bytes: rounded up to the alignment, and one
    // alignment unit for an empty buffer (std::aligned_alloc needs a nonzero multiple).
    static size_t blockBytes(size_t bytes) {
        const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
        return rounded == 0 ? kAlignment : rounded;
    }

    // Buffers are zero-filled by contract (backend.h). A large fill (a batch of destination
    // images) is split over the backend's threads: one thread cannot reach the memory bandwidth,
    // and the fill would otherwise cost about as much as the element-wise op that follows.
    static void zeroFill(char* p, size_t bytes) {
        constexpr size_t kPiece = size_t(1) << 18;
        if (bytes < 4 * kPiece) {
            std::memset(p, 0, bytes);
            return;
        }
        const int64_t pieces = int64_t((bytes + kPiece - 1) / kPiece);
        cpu::parallelFor(pieces, 1, [&](int64_t begin, int64_t end) {
            const size_t from = size_t(begin) * kPiece, to = std::min(bytes, size_t(end) * kPiece);
            std::memset(p + from, 0, to - from);
        });
    }

    void* data_;
    size_t length_;
};

using WorkItem = std::function<void()>;

struct Submission {
    uint64_t id = 0;
    std::vector<WorkItem> work;
    std::function<void(const std::string&)> done;
};

// The worker thread and its FIFO. The thread owns a reference to this state, so the
// queue handle may be destroyed on any thread (even the worker itself, when a completion
// releases the last command buffer) without joining.
//
// A thread that waits for a command buffer whose work has not started yet runs it itself
// (runIfNext), when it is next in line and nothing else of the queue is running: commit order
// is kept, and the common "commit, then wait" costs no hand-off to another thread (on a busy
// machine waking the worker can take longer than a small op).
struct QueueWorker {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Submission> pending;
    uint64_t nextId = 1;
    bool busy = false;  // a submission of this queue is running (on the worker or a waiter)
    bool started = false;
    bool stopping = false;

    static void execute(Submission& next) {
        std::string error;
        for (auto& item : next.work) {
            try {
                item();
            } catch (const std::exception& e) {
                error = e.what();
            } catch (...) {
                error = "unknown error in CPU work item";
            }
            if (!error.empty()) break;  // later items may depend on the failed one
        }
        next.work.clear();  // release captured resources before completion is reported
        next.done(error.empty() ? error : "mpsgrad CPU backend: " + error);
    }

    static void run(std::shared_ptr<QueueWorker> self) {
        for (;;) {
            Submission next;
            {
                std::unique_lock<std::mutex> lock(self->mutex);
                self->wake.wait(lock, [&] {
                    return (self->stopping && !self->busy) || (!self->pending.empty() && !self->busy);
                });
                if (self->pending.empty()) return;  // stopping, and everything submitted has run
                next = std::move(self->pending.front());
                self->pending.pop_front();
                self->busy = true;
            }
            execute(next);
            std::lock_guard<std::mutex> lock(self->mutex);
            self->busy = false;
            self->wake.notify_all();
        }
    }

    // Runs submission `id` on the calling thread if it is next and the queue is idle.
    void runIfNext(uint64_t id) {
        Submission next;
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (busy || pending.empty() || pending.front().id != id) return;
            next = std::move(pending.front());
            pending.pop_front();
            busy = true;
        }
        execute(next);
        std::lock_guard<std::mutex> lock(mutex);
        busy = false;
        // The worker takes what was committed meanwhile. With nothing pending (the usual
        // "commit, then wait") it would only wake to sleep again: no futex wake-up then.
        if (!pending.empty() || stopping) wake.notify_all();
    }
};

// Runs committed command buffers in commit order on one worker thread.
class CpuQueue final : public BackendQueue, public std::enable_shared_from_this<CpuQueue> {
public:
    CpuQueue() : worker_(std::make_shared<QueueWorker>()) {}
    ~CpuQueue() override {
        std::lock_guard<std::mutex> lock(worker_->mutex);
        worker_->stopping = true;
        worker_->wake.notify_all();
    }

    std::unique_ptr<BackendCommandBuffer> newCommandBuffer() override;

    // Queues the submission and returns its id.
    uint64_t submit(Submission submission) {
        std::lock_guard<std::mutex> lock(worker_->mutex);
        if (!worker_->started) {
            std::thread(QueueWorker::run, worker_).detach();
            worker_->started = true;
        }
        submission.id = worker_->nextId++;
        const uint64_t id = submission.id;
        worker_->pending.push_back(std::move(submission));
        worker_->wake.notify_all();
        return id;
    }

    void runIfNext(uint64_t id) { worker_->runIfNext(id); }

private:
    std::shared_ptr<QueueWorker> worker_;
};

class CpuCommandBuffer final : public BackendCommandBuffer {
public:
    explicit CpuCommandBuffer(std::shared_ptr<CpuQueue> queue) : queue_(std::move(queue)) {}

    void add(WorkItem item) { work_.push_back(std::move(item)); }
    // The work runs in order on one thread, so a host point is a work item like any other: it runs
    // after the items before it returned, and an exception stops the submission there.
    void encodeHostCallback(std::function<void()> fn) override { add(std::move(fn)); }

    void commit(std::function<void(const std::string&)> done) override {
        id_ = queue_->submit(Submission{0, std::move(work_), std::move(done)});
        work_.clear();
    }
    // Runs the work here if the worker has not started it (see QueueWorker); either way the
    // core CommandBuffer then waits for `done`.
    void wait() override {
        if (id_ != 0) queue_->runIfNext(id_);
    }

private:
    std::shared_ptr<CpuQueue> queue_;
    std::vector<WorkItem> work_;
    uint64_t id_ = 0;  // the submission's id once committed
};

std::unique_ptr<BackendCommandBuffer> CpuQueue::newCommandBuffer() {
    return std::make_unique<CpuCommandBuffer>(shared_from_this());
}

class CpuBackend final : public Backend {
public:
    std::string name() const override { return "cpu"; }
    std::shared_ptr<Buffer> newBuffer(size_t bytes, BufferFill fill) override {
        return std::make_shared<CpuBuffer>(bytes, fill);
    }
    std::shared_ptr<BackendQueue> newQueue() override { return std::make_shared<CpuQueue>(); }

    void copyBuffer(CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                    size_t bytes) override {
        bindings::checkCopyBuffer(source, destination, bytes);
        encode(cb, [source, destination, bytes] {
            // Checked when the work runs: a bad binding fails this command buffer, never the process.
            if (!source || !destination || source.offset + bytes > source.buffer->length() ||
                destination.offset + bytes > destination.buffer->length())
                throw std::out_of_range("copyBuffer: a binding is missing or too small for the copy");
            std::memmove(destination.floats(), source.floats(), bytes);
        });
    }

    void convertImageFormat(CommandBuffer& cb, const ConvertFormatParams& p, const BufferSlice& source,
                            const BufferSlice& destination) override {
        bindings::checkConvertImageFormat(p, source, destination);
        encode(cb, [=] { cpu::convertImageFormat(p, source.floats(), destination.floats()); });
    }

    void convolutionForward(CommandBuffer& cb, const ConvolutionParams& p, const BufferSlice& source,
                            const BufferSlice& weights, const BufferSlice& biases, const BufferSlice& neuronData,
                            const BufferSlice& destination, const BufferSlice& preactivation) override {
        bindings::checkConvolutionForward(p, source, weights, biases, neuronData, destination, preactivation);
        encode(cb, [=] {
            cpu::convolutionForward(p, source.floats(), weights.floats(), biases.floats(), neuronData.floats(),
                                    destination.floats(), preactivation.floats());
        });
    }

    void convolutionDataGradient(CommandBuffer& cb, const ConvolutionDataGradientParams& p,
                                 const BufferSlice& gradient, const BufferSlice& weights,
                                 const BufferSlice& biases, const BufferSlice& destination) override {
        bindings::checkConvolutionDataGradient(p, gradient, weights, biases, destination);
        encode(cb, [=] {
            cpu::convolutionDataGradient(p, gradient.floats(), weights.floats(), biases.floats(),
                                         destination.floats());
        });
    }

    void convolutionWeightGradient(CommandBuffer& cb, const ConvolutionWeightGradientParams& p,
                                   const BufferSlice& gradient, const BufferSlice& source,
                                   const BufferSlice& weightGradient, const BufferSlice& biasGradient) override {
        bindings::checkConvolutionWeightGradient(p, gradient, source, weightGradient, biasGradient);
        encode(cb, [=] {
            cpu::convolutionWeightGradient(p, gradient.floats(), source.floats(), weightGradient.floats(),
                                           biasGradient.floats());
        });
    }

    void convolutionForwardHalf(CommandBuffer& cb, const ConvolutionParams& p, const HalfBindings& formats,
                                const BufferSlice& source, const BufferSlice& weights, const BufferSlice& biases,
                                const BufferSlice& neuronData, const BufferSlice& destination,
                                const BufferSlice& preactivation) override {
        bindings::checkConvolutionForwardHalf(p, formats, source, weights, biases, neuronData, destination,
                                              preactivation);
        encode(cb, [=] {
            cpu::convolutionForward(p, formats, source.floats(), weights.floats(), biases.floats(),
                                    neuronData.floats(), destination.floats(), preactivation.floats());
        });
    }

    void convolutionDataGradientHalf(CommandBuffer& cb, const ConvolutionDataGradientParams& p,
                                     const HalfBindings& formats, const BufferSlice& gradient,
                                     const BufferSlice& weights, const BufferSlice& biases,
                                     const BufferSlice& destination) override {
        bindings::checkConvolutionDataGradientHalf(p, formats, gradient, weights, biases, destination);
        encode(cb, [=] {
            cpu::convolutionDataGradient(p, formats, gradient.floats(), weights.floats(), biases.floats(),
                                         destination.floats());
        });
    }

    void convolutionWeightGradientHalf(CommandBuffer& cb, const ConvolutionWeightGradientParams& p,
                                       const HalfBindings& formats, const BufferSlice& gradient,
                                       const BufferSlice& source, const BufferSlice& weightGradient,
                                       const BufferSlice& biasGradient) override {
        bindings::checkConvolutionWeightGradientHalf(p, formats, gradient, source, weightGradient, biasGradient);
        encode(cb, [=] {
            cpu::convolutionWeightGradient(p, formats, gradient.floats(), source.floats(), weightGradient.floats(),
                                           biasGradient.floats());
        });
    }

    void convolutionTransposeWeights(CommandBuffer& cb, const ConvolutionTransposeWeightsParams& p,
                                     const BufferSlice& source, const BufferSlice& destination) override {
        bindings::checkConvolutionTransposeWeights(p, source, destination);
        encode(cb, [=] { cpu::convolutionTransposeWeights(p, source.floats(), destination.floats()); });
    }

    void neuronForward(CommandBuffer& cb, const NeuronForwardParams& p, const BufferSlice& source,
                       const BufferSlice& neuronData, const BufferSlice& destination) override {
        bindings::checkNeuronForward(p, source, neuronData, destination);
        encode(cb, [=] { cpu::cnnNeuronForward(p, source.floats(), neuronData.floats(), destination.floats()); });
    }

    void neuronGradient(CommandBuffer& cb, const NeuronGradientParams& p, const BufferSlice& gradient,
                        const BufferSlice& source, const BufferSlice& neuronData,
                        const BufferSlice& destination) override {
        bindings::checkNeuronGradient(p, gradient, source, neuronData, destination);
        encode(cb, [=] {
            cpu::cnnNeuronGradient(p, gradient.floats(), source.floats(), neuronData.floats(), destination.floats());
        });
    }

    bool readsHalfNatively(HalfOp op) const override {
        return op == HalfOp::Neuron || op == HalfOp::Arithmetic || op == HalfOp::Dropout ||
               op == HalfOp::Convolution;
    }

    void neuronForwardHalf(CommandBuffer& cb, const NeuronForwardParams& p, const HalfBindings& formats,
                           const BufferSlice& source, const BufferSlice& neuronData,
                           const BufferSlice& destination) override {
        bindings::checkNeuronForward(p, source, neuronData, destination, formats);
        encode(cb, [=] { cpu::cnnNeuronForward(p, formats, source.floats(), neuronData.floats(), destination.floats()); });
    }

    void neuronGradientHalf(CommandBuffer& cb, const NeuronGradientParams& p, const HalfBindings& formats,
                            const BufferSlice& gradient, const BufferSlice& source, const BufferSlice& neuronData,
                            const BufferSlice& destination) override {
        bindings::checkNeuronGradient(p, gradient, source, neuronData, destination, formats);
        encode(cb, [=] {
            cpu::cnnNeuronGradient(p, formats, gradient.floats(), source.floats(), neuronData.floats(),
                                   destination.floats());
        });
    }

    void neuronPReLUWeightGradient(CommandBuffer& cb, const NeuronGradientParams& p, const BufferSlice& gradient,
                                   const BufferSlice& source, const BufferSlice& aGradient) override {
        bindings::checkNeuronPReLUWeightGradient(p, gradient, source, aGradient);
        encode(cb, [=] { cpu::cnnNeuronPReLUWeightGradient(p, gradient.floats(), source.floats(), aGradient.floats()); });
    }

    void arithmeticForward(CommandBuffer& cb, const ArithmeticParams& p, const BufferSlice& primary,
                           const BufferSlice& secondary, const BufferSlice& destination,
                           const BufferSlice& clampState) override {
        bindings::checkArithmeticForward(p, primary, secondary, destination, clampState);
        encode(cb, [=] {
            cpu::arithmeticForward(p, primary.floats(), secondary.floats(), destination.floats(), clampState.floats());
        });
    }

    void compareForward(CommandBuffer& cb, const CompareParams& p, const BufferSlice& primary,
                        const BufferSlice& secondary, const BufferSlice& destination) override {
        bindings::checkCompareForward(p, primary, secondary, destination);
        encode(cb, [=] { cpu::compareForward(p, primary.floats(), secondary.floats(), destination.floats()); });
    }

    void arithmeticGradient(CommandBuffer& cb, const ArithmeticGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& primary, const BufferSlice& secondary, const BufferSlice& clampState,
                            const BufferSlice& destination) override {
        bindings::checkArithmeticGradient(p, gradient, primary, secondary, clampState, destination);
        encode(cb, [=] {
            cpu::arithmeticGradient(p, gradient.floats(), primary.floats(), secondary.floats(), clampState.floats(),
                                    destination.floats());
        });
    }

    void arithmeticForwardHalf(CommandBuffer& cb, const ArithmeticParams& p, const HalfBindings& formats,
                               const BufferSlice& primary, const BufferSlice& secondary,
                               const BufferSlice& destination, const BufferSlice& clampState) override {
        bindings::checkArithmeticForward(p, primary, secondary, destination, clampState, formats);
        encode(cb, [=] {
            cpu::arithmeticForward(p, formats, primary.floats(), secondary.floats(), destination.floats(),
                                   clampState.floats());
        });
    }

    void compareForwardHalf(CommandBuffer& cb, const CompareParams& p, const HalfBindings& formats,
                            const BufferSlice& primary, const BufferSlice& secondary,
                            const BufferSlice& destination) override {
        bindings::checkCompareForward(p, primary, secondary, destination, formats);
        encode(cb, [=] { cpu::compareForward(p, formats, primary.floats(), secondary.floats(), destination.floats()); });
    }

    void arithmeticGradientHalf(CommandBuffer& cb, const ArithmeticGradientParams& p, const HalfBindings& formats,
                                const BufferSlice& gradient, const BufferSlice& primary, const BufferSlice& secondary,
                                const BufferSlice& clampState, const BufferSlice& destination) override {
        bindings::checkArithmeticGradient(p, gradient, primary, secondary, clampState, destination, formats);
        encode(cb, [=] {
            cpu::arithmeticGradient(p, formats, gradient.floats(), primary.floats(), secondary.floats(),
                                    clampState.floats(), destination.floats());
        });
    }

    void softmaxForward(CommandBuffer& cb, const SoftmaxParams& p, const BufferSlice& source,
                        const BufferSlice& destination) override {
        bindings::checkSoftmaxForward(p, source, destination);
        encode(cb, [=] { cpu::softmaxForward(p, source.floats(), destination.floats()); });
    }

    void softmaxGradient(CommandBuffer& cb, const SoftmaxGradientParams& p, const BufferSlice& gradient,
                         const BufferSlice& output, const BufferSlice& destination) override {
        bindings::checkSoftmaxGradient(p, gradient, output, destination);
        encode(cb, [=] { cpu::softmaxGradient(p, gradient.floats(), output.floats(), destination.floats()); });
    }

    // ---- batch normalization family
    void batchNormalizationStatistics(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& source,
                                      const BatchNormalizationVectors& v) override {
        bindings::checkBatchNormalizationStatistics(p, source, v);
        encode(cb, [=] { cpu::batchNormalizationStatistics(p, source.floats(), v.mean.floats(), v.variance.floats()); });
    }
    void batchNormalizationForward(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& source,
                                   const BatchNormalizationVectors& v, const BufferSlice& destination) override {
        bindings::checkBatchNormalizationForward(p, source, v, destination);
        encode(cb, [=] {
            cpu::batchNormalizationForward(p, source.floats(), v.gamma.floats(), v.beta.floats(), v.mean.floats(),
                                           v.variance.floats(), v.neuronData.floats(), destination.floats());
        });
    }
    void batchNormalizationStatisticsGradient(CommandBuffer& cb, const BatchNormalizationParams& p,
                                              const BufferSlice& gradient, const BufferSlice& source,
                                              const BatchNormalizationVectors& v) override {
        bindings::checkBatchNormalizationStatisticsGradient(p, gradient, source, v);
        encode(cb, [=] {
            cpu::batchNormalizationStatisticsGradient(p, gradient.floats(), source.floats(), v.gamma.floats(),
                                                      v.beta.floats(), v.mean.floats(), v.variance.floats(),
                                                      v.neuronData.floats(), v.gammaGradient.floats(),
                                                      v.betaGradient.floats());
        });
    }
    void batchNormalizationGradient(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BatchNormalizationVectors& v,
                                    const BufferSlice& destination) override {
        bindings::checkBatchNormalizationGradient(p, gradient, source, v, destination);
        encode(cb, [=] {
            cpu::batchNormalizationGradient(p, gradient.floats(), source.floats(), v.gamma.floats(), v.beta.floats(),
                                            v.mean.floats(), v.variance.floats(), v.neuronData.floats(),
                                            v.gammaGradient.floats(), v.betaGradient.floats(), destination.floats());
        });
    }
    // ---- end batch normalization family
    // ---- instance and group normalization
    void groupNormalizationForward(CommandBuffer& cb, const GroupNormalizationParams& p, const BufferSlice& source,
                                   const GroupNormalizationVectors& v, const BufferSlice& destination) override {
        bindings::checkGroupNormalizationForward(p, source, v, destination);
        encode(cb, [=] {
            cpu::groupNormalizationForward(p, source.floats(), v.gamma.floats(), v.beta.floats(),
                                           v.statistics.floats(), destination.floats());
        });
    }
    void groupNormalizationGradient(CommandBuffer& cb, const GroupNormalizationParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const GroupNormalizationVectors& v,
                                    const BufferSlice& destination) override {
        bindings::checkGroupNormalizationGradient(p, gradient, source, v, destination);
        encode(cb, [=] {
            cpu::groupNormalizationGradient(p, gradient.floats(), source.floats(), v.gamma.floats(),
                                            v.statistics.floats(), v.gammaGradient.floats(), v.betaGradient.floats(),
                                            destination.floats());
        });
    }
    // ---- optimizers (issue 14)
    void optimizerUpdate(CommandBuffer& cb, const OptimizerParams& p, const BufferSlice& gradient,
                         const BufferSlice& values, const BufferSlice& state0, const BufferSlice& state1,
                         const BufferSlice& state2, const BufferSlice& result) override {
        bindings::checkOptimizerUpdate(p, gradient, values, state0, state1, state2, result);
        encode(cb, [=] {
            cpu::optimizerUpdate(p, gradient.floats(), values.floats(), state0.floats(), state1.floats(),
                                 state2.floats(), result.floats());
        });
    }

    // ---- losses (issue 14)
    void lossElements(CommandBuffer& cb, const LossElementsParams& p, const BufferSlice& source,
                      const BufferSlice& labels, const BufferSlice& weights, const BufferSlice& destination,
                      const BufferSlice& loss, const BufferSlice& partials) override {
        bindings::checkLossElements(p, source, labels, weights, destination, loss, partials);
        encode(cb, [=] {
            cpu::lossElements(p, source.floats(), labels.floats(), weights.floats(), destination.floats(),
                              loss.floats(), partials.floats());
        });
    }
    void lossReduce(CommandBuffer& cb, const LossReduceParams& p, const BufferSlice& partials,
                    const BufferSlice& results) override {
        bindings::checkLossReduce(p, partials, results);
        encode(cb, [=] { cpu::lossReduce(p, partials.floats(), results.floats()); });
    }
    void lossScaleGradient(CommandBuffer& cb, const LossScaleParams& p, const BufferSlice& results,
                           const BufferSlice& destination) override {
        bindings::checkLossScaleGradient(p, results, destination);
        encode(cb, [=] { cpu::lossScaleGradient(p, results.floats(), destination.floats()); });
    }
    void yoloPrepare(CommandBuffer& cb, const YoloPrepareParams& p, const BufferSlice& source,
                     const BufferSlice& labels, const BufferSlice& anchors, const YoloParts& predictions,
                     const YoloParts& partLabels, const YoloParts& weights) override {
        bindings::checkYoloPrepare(p, source, labels, anchors, predictions, partLabels, weights);
        encode(cb, [=] {
            cpu::yoloPrepare(p, source.floats(), labels.floats(), anchors.floats(), floatsOf(predictions),
                             floatsOf(partLabels), floatsOf(weights));
        });
    }
    void yoloFinish(CommandBuffer& cb, const YoloFinishParams& p, const BufferSlice& source,
                    const YoloParts& gradients, const YoloParts& losses, const BufferSlice& destination,
                    const BufferSlice& loss) override {
        bindings::checkYoloFinish(p, source, gradients, losses, destination, loss);
        encode(cb, [=] {
            cpu::yoloFinish(p, source.floats(), floatsOf(gradients), floatsOf(losses), destination.floats(),
                            loss.floats());
        });
    }
    static cpu::YoloPartFloats floatsOf(const YoloParts& parts) {
        return {parts.xy.floats(), parts.wh.floats(), parts.confidence.floats(), parts.classes.floats()};
    }

    // ---- pooling family --------------------------------------------------------------------
    void poolingForward(CommandBuffer& cb, const PoolingParams& p, const BufferSlice& source,
                        const BufferSlice& destination) override {
        bindings::checkPoolingForward(p);
        encode(cb, [=] { cpu::poolingForward(p, source, destination); });
    }
    void poolingGradient(CommandBuffer& cb, const PoolingGradientParams& p, const BufferSlice& gradient,
                         const BufferSlice& source, const BufferSlice& destination) override {
        bindings::checkPoolingGradient(p);
        encode(cb, [=] { cpu::poolingGradient(p, gradient, source, destination); });
    }

    // ---- cross-channel / spatial / local contrast normalization ---------------------------------
    void normalizationForward(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& source,
                              const BufferSlice& destination) override {
        bindings::checkNormalizationForward(p, source, destination);
        encode(cb, [=] { cpu::normalizationForward(p, source.floats(), destination.floats()); });
    }
    void normalizationGradient(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& gradient,
                               const BufferSlice& source, const BufferSlice& destination) override {
        bindings::checkNormalizationGradient(p, gradient, source, destination);
        encode(cb, [=] { cpu::normalizationGradient(p, gradient.floats(), source.floats(), destination.floats()); });
    }

    // ---- upsampling and dropout families ------------------------------------------------------
    void upsamplingForward(CommandBuffer& cb, const UpsamplingParams& p, const BufferSlice& source,
                           const BufferSlice& destination) override {
        encode(cb, [=] { cpu::upsamplingForward(p, source, destination); });
    }
    void upsamplingGradient(CommandBuffer& cb, const UpsamplingGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& destination) override {
        encode(cb, [=] { cpu::upsamplingGradient(p, gradient, destination); });
    }
    void dropout(CommandBuffer& cb, const DropoutParams& p, const BufferSlice& source,
                 const BufferSlice& destination) override {
        encode(cb, [=] { cpu::dropout(p, source, destination); });
    }
    void dropoutHalf(CommandBuffer& cb, const DropoutParams& p, const HalfBindings& formats, const BufferSlice& source,
                     const BufferSlice& destination) override {
        encode(cb, [=] { cpu::dropout(p, formats, source, destination); });
    }

    // ---- sub-pixel convolution -----------------------------------------------------------------
    void subPixelShuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& low,
                         const BufferSlice& high) override {
        bindings::checkSubPixelShuffle(p, low, high);
        encode(cb, [=] { cpu::subPixelShuffle(p, low, high); });
    }
    void subPixelUnshuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& high,
                           const BufferSlice& low) override {
        bindings::checkSubPixelShuffle(p, low, high);
        encode(cb, [=] { cpu::subPixelUnshuffle(p, high, low); });
    }

    // ---- reshape and pad family ---------------------------------------------------------------
    void reshapeCopy(CommandBuffer& cb, const ReshapeParams& p, const BufferSlice& source,
                     const BufferSlice& destination) override {
        bindings::checkReshapeCopy(p, source, destination);
        encode(cb, [=] { cpu::reshapeCopy(p, source, destination); });
    }
    void padForward(CommandBuffer& cb, const PadParams& p, const BufferSlice& source, const BufferSlice& destination,
                    const BufferSlice& maps, const BufferSlice& fill) override {
        bindings::checkPadForward(p, source, destination, maps, fill);
        encode(cb, [=] { cpu::padForward(p, source, destination, maps, fill); });
    }
    void padGradient(CommandBuffer& cb, const PadGradientParams& p, const BufferSlice& gradient,
                     const BufferSlice& destination, const BufferSlice& maps) override {
        bindings::checkPadGradient(p, gradient, destination, maps);
        encode(cb, [=] { cpu::padGradient(p, gradient, destination, maps); });
    }

    // ---- Gram matrix and spatial mean -----------------------------------------------------------
    void gramMatrix(CommandBuffer& cb, const GramMatrixParams& p, const BufferSlice& source,
                    const BufferSlice& destination) override {
        bindings::checkGramMatrix(p, source, destination);
        encode(cb, [=] { cpu::gramMatrix(p, source, destination); });
    }
    void gramMatrixGradient(CommandBuffer& cb, const GramMatrixGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& source, const BufferSlice& destination) override {
        bindings::checkGramMatrixGradient(p, gradient, source, destination);
        encode(cb, [=] { cpu::gramMatrixGradient(p, gradient, source, destination); });
    }
    void spatialMean(CommandBuffer& cb, const SpatialMeanParams& p, const BufferSlice& source,
                     const BufferSlice& destination) override {
        bindings::checkSpatialMean(p, source, destination);
        encode(cb, [=] { cpu::spatialMean(p, source, destination); });
    }
    void spatialMeanGradient(CommandBuffer& cb, const SpatialMeanGradientParams& p, const BufferSlice& gradient,
                             const BufferSlice& destination) override {
        bindings::checkSpatialMeanGradient(p, gradient, destination);
        encode(cb, [=] { cpu::spatialMeanGradient(p, gradient, destination); });
    }

private:
    // Work items capture their BufferSlices by value, which keeps the memory alive until
    // the item has run. `op` defaults to the calling op's name (GCC and Clang): what the
    // profiler reports (core/profiler.h).
    static void encode(CommandBuffer& cb, WorkItem item, const char* op = __builtin_FUNCTION()) {
        cb.checkEncodable();
        static_cast<CpuCommandBuffer&>(cb.backend()).add(profiler::timed(op, "cpu", cb.id(), std::move(item)));
    }
};

}  // namespace

std::shared_ptr<Backend> makeCpuBackend() { return std::make_shared<CpuBackend>(); }

}  // namespace mpsgrad
