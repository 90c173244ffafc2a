// CPU backend: neuron forward, neuron gradient and the PReLU a-gradient extension.
//
// Semantics are exactly those written in metal/neuron_params.h; f and f' come from
// metal/neuron_math.h, the file the Metal kernels use, so both backends compute the same
// formulas. The neuron type is dispatched once per call to a loop instantiated for that type,
// so the per-element switch folds away and the loop over contiguous channels vectorizes.
// Rows of the clip rectangle are split across threads; every element is written by one
// thread from its own inputs only, so results are bitwise reproducible. FLOAT16 bindings are read
// and written natively, a row at a time through float32 row buffers (half_streaming.h).
#include <cstdint>
#include <vector>

#include "../../../../metal/neuron_math.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "half_fused.h"
#include "half_streaming.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

// count pixels; pixel i reads x + i*xs (and g + i*gs) and writes d + i*ds, C channels each.
struct PixelSpan {
    int64_t count;
    int64_t channels;
    const float* x;
    int64_t xs;
    const float* g;
    int64_t gs;
    float* d;
    int64_t ds;
};

// AVX2 clones (MPSGRAD_TEMPLATE_VECTOR_CLONES, GCC): the simple neurons stream at L3 speed, where 128-bit
// baseline vectors left the loop instruction-bound.
template <int32_t Type>
MPSGRAD_TEMPLATE_VECTOR_CLONES void forwardSpan(const PixelSpan& s, const NeuronParams& np, const float* channelA) {
    const float a = np.a, b = np.b, c = np.c;
    for (int64_t i = 0; i < s.count; ++i) {
        const float* x = s.x + i * s.xs;
        float* d = s.d + i * s.ds;
        for (int64_t k = 0; k < s.channels; ++k)
            d[k] = mpsgrad::neuronForward(Type, a, b, c, Type == kNeuronPReLU ? channelA[k] : 0.0f, x[k]);
    }
}

template <int32_t Type>
MPSGRAD_TEMPLATE_VECTOR_CLONES void gradientSpan(const PixelSpan& s, const NeuronParams& np, const float* channelA) {
    const float a = np.a, b = np.b, c = np.c;
    for (int64_t i = 0; i < s.count; ++i) {
        const float* x = s.x + i * s.xs;
        const float* g = s.g + i * s.gs;
        float* d = s.d + i * s.ds;
        for (int64_t k = 0; k < s.channels; ++k)
            d[k] = g[k] * mpsgrad::neuronDerivative(Type, a, b, c,
                                                    Type == kNeuronPReLU ? channelA[k] : 0.0f, x[k]);
    }
}

using SpanFn = void (*)(const PixelSpan&, const NeuronParams&, const float*);

template <int32_t... Types>
struct SpanTables {
    static constexpr SpanFn forward[] = {&forwardSpan<Types>...};
    static constexpr SpanFn gradient[] = {&gradientSpan<Types>...};
};
using Tables = SpanTables<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>;

// Whole dense FLOAT16 images (half_fused.h): the neuron as a map over flat arrays. False when the
// processor has no F16C (the caller then takes the staged path).
template <int32_t Type>
bool forwardFusedHalf(const uint16_t* x, uint16_t* d, int64_t count, const NeuronParams& np) {
    const float a = np.a, b = np.b, c = np.c;
    const uint16_t* in[1] = {x};
    return parallelFusedHalfMap<1>(in, d, count, [=](const float (*v)[8], float* o) {
        for (int j = 0; j < 8; ++j) o[j] = mpsgrad::neuronForward(Type, a, b, c, 0.0f, v[0][j]);
    });
}

template <int32_t Type>
bool gradientFusedHalf(const uint16_t* g, const uint16_t* x, uint16_t* d, int64_t count, const NeuronParams& np) {
    const float a = np.a, b = np.b, c = np.c;
    const uint16_t* in[2] = {g, x};
    return parallelFusedHalfMap<2>(in, d, count, [=](const float (*v)[8], float* o) {
        for (int j = 0; j < 8; ++j) o[j] = v[0][j] * mpsgrad::neuronDerivative(Type, a, b, c, 0.0f, v[1][j]);
    });
}

using FusedForwardFn = bool (*)(const uint16_t*, uint16_t*, int64_t, const NeuronParams&);
using FusedGradientFn = bool (*)(const uint16_t*, const uint16_t*, uint16_t*, int64_t, const NeuronParams&);

template <int32_t... Types>
struct FusedTables {
    static constexpr FusedForwardFn forward[] = {&forwardFusedHalf<Types>...};
    static constexpr FusedGradientFn gradient[] = {&gradientFusedHalf<Types>...};
};
using Fused = FusedTables<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>;

// The clip is the whole destination, read from (0, 0) of same-sized whole dense images: the op is
// a map over flat arrays (no edge reads, no per-channel data).
bool flatForward(const NeuronForwardParams& p) {
    return !p.neuron.hasChannelData && p.sourceX == 0 && p.sourceY == 0 && p.clipX == 0 && p.clipY == 0 &&
           denseWhole(p.destination, p.clipWidth, p.clipHeight, p.batch) &&
           denseWhole(p.source, p.clipWidth, p.clipHeight, p.batch);
}

bool flatGradient(const NeuronGradientParams& p) {
    return !p.neuron.hasChannelData && p.gradientX == 0 && p.gradientY == 0 && p.sourceX == 0 && p.sourceY == 0 &&
           p.clipX == 0 && p.clipY == 0 && denseWhole(p.destination, p.clipWidth, p.clipHeight, p.batch) &&
           denseWhole(p.source, p.clipWidth, p.clipHeight, p.batch) &&
           denseWhole(p.gradient, p.clipWidth, p.clipHeight, p.batch);
}

void checkNeuron(const char* op, const NeuronParams& n, const float* neuronData, int32_t dataOffset) {
    if (n.type < 0 || n.type >= kNeuronCount) invalid(op, "unknown neuron type " + std::to_string(n.type));
    if (n.type == kNeuronPReLU && !n.hasChannelData)
        invalid(op, "PReLU needs per-channel data (hasChannelData = 1)");
    if (n.hasChannelData && neuronData == nullptr) invalid(op, "neuronData is null but hasChannelData = 1");
    if (n.hasChannelData && dataOffset < 0) invalid(op, "negative neuronDataOffset");
}

// Merges pixel spans into one flat span when every binding is dense (channels == pixelStride)
// and the channel index does not matter (no per-channel data).
PixelSpan flatten(PixelSpan s, int64_t pixelStride, bool perChannel) {
    bool dense = s.ds == s.channels && s.xs == s.channels && (s.g == nullptr || s.gs == s.channels);
    if (!perChannel && dense && pixelStride == s.channels) {
        s.channels *= s.count;
        s.count = 1;
    }
    return s;
}

// The forward op over rows of the clip, for X stored as XT and Y as DT (float, or uint16_t: IEEE
// half through half_streaming.h's row buffers).
template <class XT, class DT>
void neuronForwardRows(const NeuronForwardParams& p, const void* source, const float* channelA, void* destination) {
    const int32_t C = p.destination.channels;
    const SpanFn fn = Tables::forward[p.neuron.type];
    const bool perChannel = p.neuron.hasChannelData != 0;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * C), [&](int64_t r0, int64_t r1) {
        std::vector<float> zeros(size_t(C), 0.0f);
        RowReader<XT> x(source, p.source);
        RowWriter<DT> d(destination, p.destination);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            RowRuns in[1] = {x.runs(n, p.sourceX, saturatedIndex(p.sourceY, y), p.clipWidth, p.edgeMode, zeros.data())};
            float* dRow = d.row(n, p.clipX, p.clipY + y, p.clipWidth);
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                PixelSpan s{e - b, C, ptrs[0], strides[0], nullptr, 0,
                            dRow + int64_t(b) * p.destination.pixelStride, p.destination.pixelStride};
                fn(flatten(s, p.destination.pixelStride, perChannel), p.neuron, channelA);
            });
            d.commit();
        }
    });
}

template <class GT, class XT, class DT>
void neuronGradientRows(const NeuronGradientParams& p, const void* gradient, const void* source,
                        const float* channelA, void* destination) {
    const int32_t C = p.destination.channels;
    const SpanFn fn = Tables::gradient[p.neuron.type];
    const bool perChannel = p.neuron.hasChannelData != 0;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * C), [&](int64_t r0, int64_t r1) {
        std::vector<float> zeros(size_t(C), 0.0f);
        RowReader<GT> g(gradient, p.gradient);
        RowReader<XT> x(source, p.source);
        RowWriter<DT> d(destination, p.destination);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            RowRuns in[2] = {g.runs(n, p.gradientX, p.gradientY + y, p.clipWidth, p.gradientEdgeMode, zeros.data()),
                             x.runs(n, p.sourceX, saturatedIndex(p.sourceY, y), p.clipWidth, p.sourceEdgeMode, zeros.data())};
            float* dRow = d.row(n, p.clipX, p.clipY + y, p.clipWidth);
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                PixelSpan s{e - b, C, ptrs[1], strides[1], ptrs[0], strides[0],
                            dRow + int64_t(b) * p.destination.pixelStride, p.destination.pixelStride};
                fn(flatten(s, p.destination.pixelStride, perChannel), p.neuron, channelA);
            });
            d.commit();
        }
    });
}

}  // namespace

void cnnNeuronForward(const NeuronForwardParams& p, const HalfBindings& formats, const void* source,
                      const float* neuronData, void* destination) {
    static const char* op = "cnnNeuronForward";
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkNeuron(op, p.neuron, neuronData, p.neuronDataOffset);
    const int32_t C = p.destination.channels;
    if (p.source.channels != C) invalid(op, "source and destination channel counts differ");
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const int64_t elements = int64_t(p.batch) * p.clipHeight * p.clipWidth * C;
    if (formats.source && formats.destination && flatForward(p) &&
        Fused::forward[p.neuron.type](static_cast<const uint16_t*>(source), static_cast<uint16_t*>(destination),
                                      elements, p.neuron))
        return;
    const float* channelA = p.neuron.hasChannelData ? neuronData + p.neuronDataOffset : nullptr;
    withFormats(
        [&](auto x, auto d) {
            neuronForwardRows<typename decltype(x)::type, typename decltype(d)::type>(p, source, channelA,
                                                                                     destination);
        },
        formats.source, formats.destination);
}

void cnnNeuronForward(const NeuronForwardParams& p, const float* source, const float* neuronData,
                      float* destination) {
    cnnNeuronForward(p, HalfBindings{}, source, neuronData, destination);
}

void cnnNeuronGradient(const NeuronGradientParams& p, const HalfBindings& formats, const void* gradient,
                       const void* source, const float* neuronData, void* destination) {
    static const char* op = "cnnNeuronGradient";
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkNeuron(op, p.neuron, neuronData, p.neuronDataOffset);
    const int32_t C = p.destination.channels;
    if (p.source.channels != C || p.gradient.channels != C)
        invalid(op, "gradient, source and destination channel counts differ");
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const int64_t elements = int64_t(p.batch) * p.clipHeight * p.clipWidth * C;
    if (formats.gradient && formats.source && formats.destination && flatGradient(p) &&
        Fused::gradient[p.neuron.type](static_cast<const uint16_t*>(gradient), static_cast<const uint16_t*>(source),
                                       static_cast<uint16_t*>(destination), elements, p.neuron))
        return;
    const float* channelA = p.neuron.hasChannelData ? neuronData + p.neuronDataOffset : nullptr;
    withFormats(
        [&](auto g, auto x, auto d) {
            neuronGradientRows<typename decltype(g)::type, typename decltype(x)::type, typename decltype(d)::type>(
                p, gradient, source, channelA, destination);
        },
        formats.gradient, formats.source, formats.destination);
}

void cnnNeuronGradient(const NeuronGradientParams& p, const float* gradient, const float* source,
                       const float* neuronData, float* destination) {
    cnnNeuronGradient(p, HalfBindings{}, gradient, source, neuronData, destination);
}

void cnnNeuronPReLUWeightGradient(const NeuronGradientParams& p, const float* gradient,
                                  const float* source, float* aGradient) {
    static const char* op = "cnnNeuronPReLUWeightGradient";
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "source", p.source);
    if (p.clipWidth < 0 || p.clipHeight < 0 || p.batch < 0) invalid(op, "negative clip size or batch");
    if (aGradient == nullptr) invalid(op, "aGradient is null");
    if (p.neuronDataOffset < 0) invalid(op, "negative neuronDataOffset");
    const int32_t C = p.destination.channels;
    if (p.source.channels != C || p.gradient.channels != C)
        invalid(op, "gradient, source and destination channel counts differ");
    if (C == 0) return;

    // Fixed blocks of rows (sized by the shape only) summed in parallel, then the block partials
    // summed in block order: the result does not depend on the thread count.
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    const int64_t rowsPerBlock = rowGrain(int64_t(p.clipWidth) * C);
    const int64_t blocks = (rows + rowsPerBlock - 1) / rowsPerBlock;
    std::vector<float> partial(size_t(std::max<int64_t>(blocks, 1)) * C, 0.0f);
    parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
        std::vector<float> zeros(size_t(C), 0.0f);
        for (int64_t blk = b0; blk < b1; ++blk) {
            float* acc = partial.data() + blk * C;
            const int64_t rEnd = std::min(rows, (blk + 1) * rowsPerBlock);
            for (int64_t r = blk * rowsPerBlock; r < rEnd; ++r) {
                const int64_t n = r / p.clipHeight;
                const int32_t y = int32_t(r % p.clipHeight);
                RowRuns in[2] = {
                    rowRuns(p.gradient, gradient, n, p.gradientX, p.gradientY + y, 1, p.clipWidth,
                            p.gradientEdgeMode, zeros.data()),
                    rowRuns(p.source, source, n, p.sourceX, saturatedIndex(p.sourceY, y), 1, p.clipWidth,
                            p.sourceEdgeMode, zeros.data())};
                forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                    for (int32_t i = 0; i < e - b; ++i) {
                        const float* g = ptrs[0] + i * strides[0];
                        const float* x = ptrs[1] + i * strides[1];
                        for (int32_t k = 0; k < C; ++k) acc[k] += g[k] * (x[k] < 0.0f ? x[k] : 0.0f);
                    }
                });
            }
        }
    });
    float* out = aGradient + p.neuronDataOffset;
    for (int32_t k = 0; k < C; ++k) out[k] = 0.0f;
    for (int64_t blk = 0; blk < blocks; ++blk)
        for (int32_t k = 0; k < C; ++k) out[k] += partial[size_t(blk * C + k)];
}

}  // namespace mpsgrad::cpu
