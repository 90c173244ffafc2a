// CPU backend, internal: the epilogue of the convolution and fully connected products
// (convolution.cpp, fully_connected.cpp): value = bias + sum, optionally stored as the
// preactivation, then the neuron, written to the destination pixel's channels.
//
// The neuron type and the presence of a bias are chosen once per op (makeEpilogue), which picks
// a loop instantiated for that type: inside the loop neuronForward's switch folds to one
// expression, so the simple neurons (ReLU, linear, hard sigmoid, ...) vectorize and none pays a
// per-element branch on the type. The values are those of neuronForward, bit for bit.
#pragma once

#include <cstdint>

#include "../../../../metal/common_params.h"
#include "../../../../metal/neuron_math.h"

namespace mpsgrad::cpu {

struct Epilogue {
    // Writes channels [o0, o0 + count) of one pixel from the sums v[0..count): dst and pre point
    // at channel o0 of the pixel (pre may be null: no preactivation); o0 picks the biases and
    // PReLU slopes.
    using RowFn = void (*)(const Epilogue&, const float* v, int o0, int count, float* dst, float* pre);
    RowFn fn = nullptr;
    float a = 0.0f, b = 0.0f, c = 0.0f;
    const float* bias = nullptr;    // one per output channel, or null
    const float* slopes = nullptr;  // PReLU's per-channel data, or null

    void operator()(const float* v, int o0, int count, float* dst, float* pre) const {
        fn(*this, v, o0, count, dst, pre);
    }
};

namespace epilogue_detail {

template <int32_t Type, bool Bias>
void row(const Epilogue& e, const float* __restrict v, int o0, int count, float* __restrict dst,
         float* __restrict pre) {
    const float a = e.a, b = e.b, c = e.c;
    const float* __restrict bias = Bias ? e.bias + o0 : nullptr;
    const float* __restrict slopes = Type == kNeuronPReLU ? e.slopes + o0 : nullptr;
    auto value = [&](int k) { return Bias ? bias[k] + v[k] : v[k]; };
    auto neuron = [&](int k, float x) {
        if constexpr (Type == kNeuronNone) return x;
        else return mpsgrad::neuronForward(Type, a, b, c, Type == kNeuronPReLU ? slopes[k] : 0.0f, x);
    };
    if (pre) {
        for (int k = 0; k < count; ++k) {
            const float x = value(k);
            pre[k] = x;
            dst[k] = neuron(k, x);
        }
    } else {
        for (int k = 0; k < count; ++k) dst[k] = neuron(k, value(k));
    }
}

template <int32_t... Types>
struct Table {
    static constexpr Epilogue::RowFn withBias[] = {&row<Types, true>...};
    static constexpr Epilogue::RowFn withoutBias[] = {&row<Types, false>...};
};
using Rows = Table<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>;
static_assert(kNeuronCount == 16, "list every neuron type in epilogue_detail::Rows");

}  // namespace epilogue_detail

// The epilogue of an op with neuron `n`, biases (null: none) and the neuron's channel data
// (used only when n.hasChannelData). Unknown types act as no neuron, as neuronForward does; a
// PReLU without channel data has slope 0, as neuronForward with channelA 0.
inline Epilogue makeEpilogue(const NeuronParams& n, const float* biases, const float* neuronData) {
    Epilogue e;
    e.a = n.a;
    e.b = n.b;
    e.c = n.c;
    e.bias = biases;
    int32_t type = n.type >= 0 && n.type < kNeuronCount ? n.type : int32_t(kNeuronNone);
    if (type == kNeuronPReLU) {
        if (n.hasChannelData && neuronData) {
            e.slopes = neuronData;
        } else {
            type = kNeuronReLU;
            e.a = 0.0f;
        }
    }
    e.fn = biases ? epilogue_detail::Rows::withBias[type] : epilogue_detail::Rows::withoutBias[type];
    return e;
}

}  // namespace mpsgrad::cpu
