// Pooling cases shared by test_cpu_pooling.cpp (CPU ops against a double-precision reference) and
// test_metal_pooling.cpp (Metal ops against the CPU ops), and the reference itself: a direct
// transcription of the definitions of metal/pooling_params.h that SCATTERS each window's gradient
// to the pixels its taps read, independent of the backends' gathering loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "metal/pooling_params.h"

namespace mpsgrad::testpool {

struct PoolCase {
    std::string name;
    int mode = kPoolingMax;
    int kW = 2, kH = 2, sX = 2, sY = 2, dX = 1, dY = 1;
    int edge = kEdgeZero;
    bool band = false;
    int padX = 0, padY = 0;
    int srcW = 9, srcH = 7, channels = 5, batch = 2;
    int winLeft = -1, winTop = 0;  // top-left tap of window 0
    int outW = 4, outH = 3;        // windows per row / rows of windows
};

inline std::vector<PoolCase> poolCases() {
    std::vector<PoolCase> v;
    const char* modes[] = {"Max", "Average", "L2"};
    for (int mode = 0; mode < 3; ++mode) {
        for (int edge : {kEdgeZero, kEdgeClamp}) {
            PoolCase c;
            c.mode = mode;
            c.edge = edge;
            c.name = std::string(modes[mode]) + (edge == kEdgeZero ? "Zero" : "Clamp");
            v.push_back(c);
            PoolCase odd = c;  // odd window, stride below it, windows off every edge, 37 channels
            odd.name += "K3S1";
            odd.kW = 3, odd.kH = 3, odd.sX = 1, odd.sY = 1, odd.winLeft = -2, odd.winTop = -1;
            odd.outW = 11, odd.outH = 8, odd.channels = 37;
            v.push_back(odd);
            PoolCase dil = c;  // dilated, non-square, stride above the window
            dil.name += "Dilated";
            dil.kW = 2, dil.kH = 3, dil.dX = 3, dil.dY = 2, dil.sX = 4, dil.sY = 1, dil.winLeft = -2;
            dil.winTop = -2, dil.outW = 3, dil.outH = 6, dil.channels = 4;
            v.push_back(dil);
        }
    }
    PoolCase band;
    band.name = "AverageBand";
    band.mode = kPoolingAverage, band.edge = kEdgeClamp, band.band = true, band.padX = 1, band.padY = 2;
    band.kW = 4, band.kH = 3, band.sX = 1, band.sY = 2, band.winLeft = -4, band.winTop = -3, band.outW = 12;
    band.outH = 6;
    v.push_back(band);
    return v;
}

inline PoolingWindow windowOf(const PoolCase& c) {
    PoolingWindow w{};
    w.mode = c.mode;
    w.kernelWidth = c.kW, w.kernelHeight = c.kH, w.strideX = c.sX, w.strideY = c.sY;
    w.dilationX = c.dX, w.dilationY = c.dY, w.windowLeftX = c.winLeft, w.windowTopY = c.winTop;
    w.edgeMode = c.edge;
    w.countMode = c.band ? kPoolingCountInBand : kPoolingCountAll;
    w.zeroPadX = c.padX, w.zeroPadY = c.padY;
    return w;
}

// A dense NHWC image with `channels` channels stored in slices of 4 at channel offset `offset`.
inline ImageLayout denseLayout(int w, int h, int channels, int offset = 0) {
    ImageLayout l{};
    l.width = w, l.height = h;
    l.pixelStride = (offset + channels + 3) / 4 * 4;
    l.imageStride = l.pixelStride * w * h;
    l.channelOffset = offset, l.channels = channels;
    return l;
}

inline size_t floatsOf(const ImageLayout& l, int batch) { return size_t(l.imageStride) * batch; }

// The floats a binding of `batch` images of `l` must hold (up to the last channel of the last pixel).
inline size_t spanOf(const ImageLayout& l, int batch) {
    return size_t(batch - 1) * l.imageStride + (size_t(l.height) * l.width - 1) * l.pixelStride + l.channelOffset +
           l.channels;
}

inline size_t at(const ImageLayout& l, int n, int x, int y, int c) {
    return size_t(n) * l.imageStride + (size_t(y) * l.width + x) * l.pixelStride + l.channelOffset + c;
}

// Y (outW x outH windows) and dX (the whole source) in double, from the definitions.
struct PoolReference {
    std::vector<double> y, dx;  // [n][oy][ox][c], [n][v][u][c]
};

inline PoolReference poolReference(const PoolCase& c, const ImageLayout& xl, const std::vector<float>& x,
                                   const ImageLayout& gl, const std::vector<float>& g) {
    const int N = c.channels, W = c.srcW, H = c.srcH;
    PoolReference r;
    r.y.assign(size_t(c.batch) * c.outH * c.outW * N, 0.0);
    r.dx.assign(size_t(c.batch) * H * W * N, 0.0);
    for (int n = 0; n < c.batch; ++n)
        for (int jy = 0; jy < c.outH; ++jy)
            for (int jx = 0; jx < c.outW; ++jx)
                for (int ch = 0; ch < N; ++ch) {
                    // Every tap: where it reads (-1: nothing) and the value.
                    struct Tap { int u, v; double value; bool inside; };
                    std::vector<Tap> taps;
                    for (int ty = 0; ty < c.kH; ++ty)
                        for (int tx = 0; tx < c.kW; ++tx) {
                            int qx = c.winLeft + c.sX * jx + c.dX * tx, qy = c.winTop + c.sY * jy + c.dY * ty;
                            bool inside = qx >= 0 && qx < W && qy >= 0 && qy < H;
                            if (!inside && c.edge == kEdgeClamp && c.mode != kPoolingAverage)
                                qx = std::clamp(qx, 0, W - 1), qy = std::clamp(qy, 0, H - 1), inside = true;
                            taps.push_back({qx, qy, inside ? double(x[at(xl, n, qx, qy, ch)]) : 0.0, inside});
                        }
                    const double gv = g[at(gl, n, jx, jy, ch)];
                    double out = 0.0;
                    if (c.mode == kPoolingMax) {
                        size_t best = 0;
                        for (size_t t = 1; t < taps.size(); ++t)
                            if (taps[t].value > taps[best].value) best = t;
                        out = taps[best].value;
                        if (taps[best].inside) r.dx[((size_t(n) * H + taps[best].v) * W + taps[best].u) * N + ch] += gv;
                    } else if (c.mode == kPoolingAverage) {
                        int count = 0;
                        for (int ty = 0; ty < c.kH; ++ty)
                            for (int tx = 0; tx < c.kW; ++tx) {
                                int qx = c.winLeft + c.sX * jx + c.dX * tx, qy = c.winTop + c.sY * jy + c.dY * ty;
                                count += !c.band || (qx >= -c.padX && qx <= W - 1 + c.padX && qy >= -c.padY &&
                                                     qy <= H - 1 + c.padY);
                            }
                        double sum = 0.0;
                        for (const Tap& t : taps) sum += t.value;
                        out = count > 0 ? sum / count : 0.0;
                        for (const Tap& t : taps)
                            if (t.inside) r.dx[((size_t(n) * H + t.v) * W + t.u) * N + ch] += gv / count;
                    } else {
                        double sum = 0.0;
                        for (const Tap& t : taps) sum += t.value * t.value;
                        out = std::sqrt(sum);
                        for (const Tap& t : taps)
                            if (t.inside && out > 0)
                                r.dx[((size_t(n) * H + t.v) * W + t.u) * N + ch] += gv * t.value / out;
                    }
                    r.y[((size_t(n) * c.outH + jy) * c.outW + jx) * N + ch] = out;
                }
    return r;
}

inline std::vector<float> noise(size_t count, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(count);
    for (float& f : v) f = dist(gen);
    return v;
}

}  // namespace mpsgrad::testpool
