// Runs one real project kernel (or a planted copy of it) once on the fake device and compares the
// result with a reference computed here, so planted bugs in copies of metal/*.metal are reported:
//
//   planted_driver prelu [pixels]     neuron_prelu_weight_gradient, 6 channels (2 threadgroups,
//                                     the second with 2 channels), `pixels` clip pixels (default 64:
//                                     both simdgroups that get work have all 32 lanes busy)
//   planted_driver softmax            softmax_forward_simd, 1 pixel of 256 channels, one dominant
//                                     logit in channel 200 (lane 18)
//
// Exit status: 0 results match, 1 results differ, 2 the command buffer failed (its error, e.g. a
// race report, is printed). Buffers are exactly sized, so under ASan an overrun is reported.
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "neuron_params.h"
#include "softmax_params.h"

namespace {

MTL::Device* gDevice;
MTL::Library* gLibrary;
std::vector<NS::Object*> gOwned;  // released at the end (the ASan build checks for leaks)

template <class T>
T* own(T* o) {
    gOwned.push_back(o);
    return o;
}

MTL::ComputePipelineState* pipeline(const char* name, MTL::FunctionConstantValues* values) {
    NS::Error* error = nullptr;
    MTL::Function* fn = gLibrary->newFunction(NS::String::string(name, NS::UTF8StringEncoding), values, &error);
    if (!fn) {
        std::fprintf(stderr, "planted_driver: no kernel %s\n", name);
        std::exit(3);
    }
    MTL::ComputePipelineState* p = own(gDevice->newComputePipelineState(fn, &error));
    fn->release();
    return p;
}

MTL::Buffer* buffer(const std::vector<float>& v) {
    return own(gDevice->newBuffer(v.data(), v.size() * sizeof(float), MTL::ResourceStorageModeShared));
}

bool finish(MTL::CommandBuffer* cb) {
    cb->commit();
    cb->waitUntilCompleted();
    if (cb->status() == MTL::CommandBufferStatusError) {
        std::printf("planted_driver: command buffer failed: %s\n",
                    cb->error()->localizedDescription()->utf8String());
        return false;
    }
    return true;
}

mpsgrad::ImageLayout layout(int w, int h, int channels) {
    const int stride = (channels + 3) / 4 * 4;
    return mpsgrad::ImageLayout{w, h, stride, w * h * stride, 0, channels};
}

int compare(const std::vector<float>& got, const std::vector<double>& want, double tol) {
    int bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
            if (bad++ < 4) std::printf("planted_driver: result[%zu] = %g, expected %g\n", i, got[i], want[i]);
        }
    std::printf("planted_driver: %s\n", bad ? "results differ" : "results match");
    return bad ? 1 : 0;
}

int runPrelu(int pixels) {
    const int channels = 6, width = pixels, height = 1;
    mpsgrad::NeuronGradientParams p{};
    p.gradient = p.source = p.destination = layout(width, height, channels);
    p.batch = 1;
    p.clipWidth = width;
    p.clipHeight = height;
    std::vector<float> g(std::size_t(p.gradient.imageStride)), x(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
        g[i] = float(int(i * 7 % 13) - 6) / 8.0f;
        x[i] = float(int(i * 5 % 11) - 7) / 4.0f;
    }
    std::vector<double> want(channels, 0.0);
    for (int m = 0; m < pixels; ++m)
        for (int c = 0; c < channels; ++c) {
            const float xv = x[std::size_t(m * p.source.pixelStride + c)];
            want[std::size_t(c)] += double(g[std::size_t(m * p.gradient.pixelStride + c)]) * (xv < 0 ? xv : 0.0);
        }
    MTL::FunctionConstantValues* values = own(MTL::FunctionConstantValues::alloc()->init());
    bool no = false;
    values->setConstantValue(&no, MTL::DataTypeBool, NS::UInteger(1));
    values->setConstantValue(&no, MTL::DataTypeBool, NS::UInteger(2));
    MTL::ComputePipelineState* pso = pipeline("neuron_prelu_weight_gradient", values);
    MTL::Buffer* bg = buffer(g);
    MTL::Buffer* bx = buffer(x);
    MTL::Buffer* ba = buffer(std::vector<float>(channels, 0.0f));  // exactly `channels` floats
    MTL::CommandBuffer* cb = own(gDevice->newCommandQueue())->commandBuffer();
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(pso);
    enc->setBytes(&p, sizeof p, 0);
    enc->setBuffer(bg, 0, 1);
    enc->setBuffer(bx, 0, 2);
    enc->setBuffer(ba, 0, 3);
    enc->dispatchThreadgroups(MTL::Size((channels + 3) / 4, 1, 1), MTL::Size(128, 1, 1));
    enc->endEncoding();
    if (!finish(cb)) return 2;
    std::vector<float> got(channels);
    std::memcpy(got.data(), ba->contents(), channels * sizeof(float));
    return compare(got, want, 1e-5);
}

int runSoftmax() {
    const int channels = 256;
    mpsgrad::SoftmaxParams p{};
    p.source = p.destination = layout(1, 1, channels);
    p.batch = 1;
    p.clipWidth = p.clipHeight = 1;
    std::vector<float> x(channels);
    for (int c = 0; c < channels; ++c) x[std::size_t(c)] = float(c % 7) / 7.0f;
    x[200] = 120.0f;  // exp(120) overflows float unless the max (in lane 200 / 4 % 32) is subtracted
    double mx = 120.0, sum = 0.0;
    for (float v : x) sum += std::exp(double(v) - mx);
    std::vector<double> want(channels);
    for (int c = 0; c < channels; ++c) want[std::size_t(c)] = std::exp(double(x[std::size_t(c)]) - mx) / sum;
    MTL::FunctionConstantValues* values = own(MTL::FunctionConstantValues::alloc()->init());
    bool no = false;
    for (NS::UInteger i = 0; i < 5; ++i) values->setConstantValue(&no, MTL::DataTypeBool, i);
    MTL::ComputePipelineState* pso = pipeline("softmax_forward_simd", values);
    MTL::Buffer* bx = buffer(x);
    MTL::Buffer* by = buffer(std::vector<float>(channels, 0.0f));
    MTL::CommandBuffer* cb = own(gDevice->newCommandQueue())->commandBuffer();
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(pso);
    enc->setBytes(&p, sizeof p, 0);
    enc->setBuffer(bx, 0, 1);
    enc->setBuffer(by, 0, 2);
    enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(128, 1, 1));
    enc->endEncoding();
    if (!finish(cb)) return 2;
    std::vector<float> got(channels);
    std::memcpy(got.data(), by->contents(), channels * sizeof(float));
    return compare(got, want, 1e-5);
}

}  // namespace

int main(int argc, char** argv) {
    NS::AutoreleasePool* pool = NS::AutoreleasePool::alloc()->init();
    gDevice = MTL::CreateSystemDefaultDevice();
    gLibrary = gDevice->newDefaultLibrary();
    const std::string what = argc > 1 ? argv[1] : "";
    int status = 3;
    if (what == "prelu")
        status = runPrelu(argc > 2 ? std::atoi(argv[2]) : 64);
    else if (what == "softmax")
        status = runSoftmax();
    else
        std::fprintf(stderr, "usage: planted_driver prelu [pixels] | softmax\n");
    pool->release();  // drains the command buffers before the objects they retain
    for (auto it = gOwned.rbegin(); it != gOwned.rend(); ++it) (*it)->release();
    gLibrary->release();
    gDevice->release();
    return status;
}
