// CPU backend: cross-channel, spatial and local contrast normalization and their gradients.
//
// Semantics are exactly those written in metal/normalization_params.h (formulas in
// docs/normalization.md). Rows of the destination are split across threads; every element is
// written by one thread from its inputs only, and every sum runs in the fixed order of the params
// header, so results are bitwise reproducible.
//
// The gradients gather: each dX element visits the windows that read it and recomputes their
// statistics (T, M) from X, as the Metal kernels do, instead of keeping them in scratch memory.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../../../../metal/normalization_params.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

// X(n, px, py, c), 0 off the image.
struct SourceReader {
    const ImageLayout& l;
    const float* base;
    float operator()(int64_t n, int32_t px, int32_t py, int32_t c) const {
        if (px < 0 || py < 0 || px >= l.width || py >= l.height) return 0.0f;
        return base[pixelIndex(l, n, px, py) + c];
    }
};

// T (and M for local contrast) of the window centered at (cx, cy), channel c.
struct WindowStats {
    float mean;
    float t;
};

// N = kernelWidth * kernelHeight as a float (the product of two sizes up to 2**20 overflows int32).
float windowCount(const NormalizationParams& p) { return float(p.kernelWidth) * float(p.kernelHeight); }

// Only the in-image taps are read (normalizationTapsInside): the cost is bounded by the image.
WindowStats windowStats(const NormalizationParams& p, const SourceReader& x, int64_t n, int32_t cx, int32_t cy,
                        int32_t c) {
    const int32_t left = cx - (p.kernelWidth >> 1), top = cy - (p.kernelHeight >> 1);
    const NormalizationTaps tx = normalizationTapsInside(left, p.kernelWidth, x.l.width);
    const NormalizationTaps ty = normalizationTapsInside(top, p.kernelHeight, x.l.height);
    const float count = windowCount(p);
    if (p.kind == kNormalizationSpatial) {
        float squares = 0.0f;
        for (int32_t j = ty.first; j <= ty.last; ++j)
            for (int32_t i = tx.first; i <= tx.last; ++i) {
                const float v = x(n, left + i, top + j, c);
                squares += v * v;
            }
        return {0.0f, p.delta + p.alpha / count * squares};
    }
    float sum = 0.0f;
    for (int32_t j = ty.first; j <= ty.last; ++j)
        for (int32_t i = tx.first; i <= tx.last; ++i) sum += x(n, left + i, top + j, c);
    const float mean = sum / count;
    float deviations = 0.0f;
    for (int32_t j = ty.first; j <= ty.last; ++j)
        for (int32_t i = tx.first; i <= tx.last; ++i) {
            const float d = x(n, left + i, top + j, c) - mean;
            deviations += d * d;
        }
    // Each off-image tap reads 0: a deviation of -M.
    const float inside = float(std::max(0, tx.last - tx.first + 1)) * float(std::max(0, ty.last - ty.first + 1));
    deviations += (count - inside) * (mean * mean);
    return {mean, p.delta + p.alpha * (deviations / count)};
}

// L(k) of cross-channel normalization at pixel (px, py).
float crossChannelL(const NormalizationParams& p, const SourceReader& x, int64_t n, int32_t px, int32_t py, int32_t k) {
    const int32_t D = p.destination.channels;
    float squares = 0.0f;
    for (int32_t q = crossChannelFirst(k, p.channelSize); q <= crossChannelLast(k, p.channelSize, D); ++q) {
        const float v = x(n, px, py, q);
        squares += v * v;
    }
    return p.delta + p.alpha / float(p.channelSize) * squares;
}

float forwardElement(const NormalizationParams& p, const SourceReader& x, int64_t n, int32_t cx, int32_t cy,
                     int32_t c) {
    const float xc = x(n, cx, cy, c);
    if (p.kind == kNormalizationCrossChannel) return xc * std::pow(crossChannelL(p, x, n, cx, cy, c), -p.beta);
    const WindowStats s = windowStats(p, x, n, cx, cy, c);
    if (p.kind == kNormalizationSpatial) return xc * std::pow(s.t, -p.beta);
    return p.pm + p.ps * (xc - p.p0 * s.mean) * std::pow(s.t, -p.beta);
}

// dX of cross-channel normalization at X pixel (px, py), channel k, whose window is j.
float crossChannelGradient(const NormalizationParams& p, const SourceReader& x, const float* g, int64_t n,
                           int32_t px, int32_t py, int32_t k) {
    const int32_t D = p.destination.channels;
    const float lk = crossChannelL(p, x, n, px, py, k);
    float sum = 0.0f;
    for (int32_t r = crossChannelReflectedFirst(k, p.channelSize);
         r <= crossChannelReflectedLast(k, p.channelSize, D); ++r) {
        const float lr = crossChannelL(p, x, n, px, py, r);
        sum += g[r] * x(n, px, py, r) * (std::pow(lr, -p.beta) / lr);
    }
    return g[k] * std::pow(lk, -p.beta) - 2.0f * (p.alpha / float(p.channelSize)) * p.beta * x(n, px, py, k) * sum;
}

// dX of spatial / local contrast normalization at X pixel (px, py), channel c: the windows j whose
// taps include the pixel, rows jy then columns jx in increasing order.
float windowGradient(const NormalizationParams& p, const SourceReader& x, const float* gBase, int64_t n, int32_t px,
                     int32_t py, int32_t c) {
    const int32_t jx0 = std::max(0, px - ((p.kernelWidth - 1) >> 1) - p.centerX);
    const int32_t jx1 = std::min(p.gradientWidth - 1, px + (p.kernelWidth >> 1) - p.centerX);
    const int32_t jy0 = std::max(0, py - ((p.kernelHeight - 1) >> 1) - p.centerY);
    const int32_t jy1 = std::min(p.gradientHeight - 1, py + (p.kernelHeight >> 1) - p.centerY);
    const float count = windowCount(p);
    const float xv = x(n, px, py, c);
    const bool spatial = p.kind == kNormalizationSpatial;
    float direct = 0.0f, sum = 0.0f;
    for (int32_t jy = jy0; jy <= jy1; ++jy)
        for (int32_t jx = jx0; jx <= jx1; ++jx) {
            const int32_t cx = p.centerX + jx, cy = p.centerY + jy;
            const float g = gBase[pixelIndex(p.gradient, n, p.gradientX + jx, p.gradientY + jy) + c];
            const WindowStats s = windowStats(p, x, n, cx, cy, c);
            const float tb = std::pow(s.t, -p.beta);
            const float xc = x(n, cx, cy, c);
            const bool center = cx == px && cy == py;
            if (spatial) {
                if (center) direct += g * tb;
                sum += g * xc * (tb / s.t);
            } else {
                direct += g * ((center ? 1.0f : 0.0f) - p.p0 / count) * tb;
                sum += g * (xv - s.mean) * (xc - p.p0 * s.mean) * (tb / s.t);
            }
        }
    if (spatial) return direct - 2.0f * p.alpha * p.beta / count * xv * sum;
    return p.ps * (direct - 2.0f * p.alpha * p.beta / count * sum);
}

void checkParams(const char* op, const NormalizationParams& p) {
    if (p.kind < kNormalizationCrossChannel || p.kind > kNormalizationLocalContrast)
        invalid(op, "unknown normalization kind " + std::to_string(p.kind));
    if (p.kernelWidth < 1 || p.kernelHeight < 1 || p.channelSize < 1) invalid(op, "kernel sizes must be >= 1");
    if (p.source.channels != p.destination.channels) invalid(op, "source and destination channel counts differ");
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
}

}  // namespace

void normalizationForward(const NormalizationParams& p, const float* source, float* destination) {
    static const char* op = "normalizationForward";
    checkParams(op, p);
    const int32_t C = p.destination.channels;
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const SourceReader x{p.source, source};
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            for (int32_t xi = 0; xi < p.clipWidth; ++xi) {
                float* d = destination + pixelIndex(p.destination, n, p.clipX + xi, p.clipY + y);
                for (int32_t c = 0; c < C; ++c) d[c] = forwardElement(p, x, n, p.centerX + xi, p.centerY + y, c);
            }
        }
    });
}

void normalizationGradient(const NormalizationParams& p, const float* gradient, const float* source,
                           float* destination) {
    static const char* op = "normalizationGradient";
    checkParams(op, p);
    checkLayout(op, "gradient", p.gradient);
    const int32_t C = p.destination.channels;
    if (p.gradient.channels != C) invalid(op, "gradient and destination channel counts differ");
    if (p.gradientWidth < 0 || p.gradientHeight < 0 || p.gradientX < 0 || p.gradientY < 0 ||
        int64_t(p.gradientX) + p.gradientWidth > p.gradient.width ||
        int64_t(p.gradientY) + p.gradientHeight > p.gradient.height)
        invalid(op, "the gradient windows lie outside the gradient image");
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const SourceReader x{p.source, source};
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t py = p.clipY + int32_t(r % p.clipHeight);
            for (int32_t xi = 0; xi < p.clipWidth; ++xi) {
                const int32_t px = p.clipX + xi;
                float* d = destination + pixelIndex(p.destination, n, px, py);
                // A dX pixel outside X is no input of the forward pass (off-image reads are the constant 0).
                if (px >= p.source.width || py >= p.source.height) {
                    for (int32_t c = 0; c < C; ++c) d[c] = 0.0f;
                    continue;
                }
                if (p.kind != kNormalizationCrossChannel) {
                    for (int32_t c = 0; c < C; ++c) d[c] = windowGradient(p, x, gradient, n, px, py, c);
                    continue;
                }
                const int32_t jx = px - p.centerX, jy = py - p.centerY;
                const bool inside = jx >= 0 && jy >= 0 && jx < p.gradientWidth && jy < p.gradientHeight;
                const float* g = inside ? gradient + pixelIndex(p.gradient, n, p.gradientX + jx, p.gradientY + jy)
                                        : nullptr;
                for (int32_t c = 0; c < C; ++c) d[c] = g ? crossChannelGradient(p, x, g, n, px, py, c) : 0.0f;
            }
        }
    });
}

}  // namespace mpsgrad::cpu
