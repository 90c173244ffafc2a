// CPU backend: the convolution data gradient as products of the incoming gradient with the
// weights as stored, then a scatter-add of the results onto the destination (col2im).
//
// Gradient pixel (ey, ex) of E, through weight tap (ky, kx), reaches the clip pixel
//   y = offY + sY*ey + dY*ky,  x = offX + sX*ex + dX*kx,  offY = -(windowTopY + dY*(kH-1))
// (the definition in metal/convolution_params.h with ty = kH-1-ky and Z[sY*ey] = E[ey]). So
//   T[e][ky][kx][c] = sum_o E[e][o] * W[o][ky][kx][c]
// is ONE product per block of gradient pixels, E (pixels x Cog, read in place) times the OHWI
// weights (Cog x kH*kW*Cig, used as stored: no repacking), and dX is the sum of the rows of T
// placed at their pixels. Compared with the per-phase gather of convolution.cpp this copies
// nothing into a panel and multiplies with a wide right-hand side: it wins when the destination
// has no more channels than the gradient (an RGB stem: 3 output columns made the gather's
// products vectors; a transposed convolution's forward pass: 64 or 128 channels out of 128 or
// 256), where the gather's panel (taps x Cog floats per destination pixel) is the larger copy.
//
// Work item = an image x a band of destination rows: an item zeroes its band (or sets it to the
// biases), then walks the gradient rows that reach the band in order, a few rows per product,
// and adds the parts of T that land in the band. A pixel's contributions are added in the order
// (ey, ex, ky, kx) whatever the bands, and each item writes only its own rows: results are
// bitwise reproducible and need no locks. Neighbouring bands recompute the few gradient rows
// they share, so an image is cut into bands only when the batch alone cannot feed the threads.
#include "conv_col2im.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blas.h"
#include "conv_geometry.h"
#include "parallel.h"

namespace mpsgrad::cpu::col2im {
namespace {

inline int64_t ceilDiv(int64_t v, int64_t m) { return (v + m - 1) / m; }
inline int floorDiv(int v, int m) { return v >= 0 ? v / m : -((-v + m - 1) / m); }

using conv::pixelIndex;

// The gradient coordinates e in [0, size) that reach some destination coordinate in [lo, hi)
// through one of `taps` taps: lo <= off + stride*e + dilation*t < hi for some t. Empty: first >= last.
struct Range {
    int first, last;
};
Range reaching(int lo, int hi, int off, int stride, int dilation, int taps, int size) {
    const int first = std::max(0, -floorDiv(-(lo - off - dilation * (taps - 1)), stride));  // ceil
    const int last = std::min(size, floorDiv(hi - 1 - off, stride) + 1);
    return {first, last};
}

}  // namespace

void dataGradient(const ConvolutionDataGradientParams& p, const float* gradient, const float* weights,
                  const float* biases, float* destination, int threads) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    const int G = p.groups, Cig = D.channels / G, Cog = E.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight, sX = p.strideX, sY = p.strideY;
    const int dX = p.dilationX, dY = p.dilationY;
    const int Kg = kH * kW * Cig;  // a row of T per group: the OHWI row length
    const int offY = -(p.windowTopY + dY * (kH - 1)), offX = -(p.windowLeftX + dX * (kW - 1));

    // The gradient columns that reach the clip; when that is all of them, several gradient rows
    // are evenly spaced pixels and make one product.
    const Range cols = reaching(0, p.clipWidth, offX, sX, dX, kW, E.width);
    const int width = std::max(0, cols.last - cols.first);
    const bool wholeRows = cols.first == 0 && cols.last == E.width;
    // Rows of T per product: about 512 KB of T, whole gradient rows when they are evenly spaced.
    const int rowsPerProduct =
        wholeRows ? int(std::max<int64_t>(1, (int64_t(1) << 17) / (std::max(1, width) * int64_t(Kg)))) : 1;

    // Bands: whole images when the batch gives each thread two of them, else cut the images into
    // up to 2*threads/batch bands of rows (at least two gradient rows' worth each).
    int bands = 1;
    if (threads > 1 && p.batch < 2 * threads)
        bands = int(std::min<int64_t>(ceilDiv(2 * threads, p.batch), std::max(1, p.clipHeight / (2 * sY))));
    const int bandHeight = int(ceilDiv(p.clipHeight, bands));
    bands = int(ceilDiv(p.clipHeight, bandHeight));
    const int64_t items = int64_t(p.batch) * bands;

    // The values the destination starts from (zeros, or the biases of a transposed convolution).
    std::vector<float> start(size_t(D.channels), 0.0f);
    if (biases) std::copy(biases, biases + D.channels, start.begin());

    parallelFor(items, threads > 1 ? 1 : items, [&](int64_t begin, int64_t end) {
        std::vector<float> t(size_t(rowsPerProduct) * std::max(1, width) * Kg);
        for (int64_t item = begin; item < end; ++item) {
            const int n = int(item / bands), y0 = int(item % bands) * bandHeight;
            const int y1 = std::min(p.clipHeight, y0 + bandHeight);
            for (int y = y0; y < y1; ++y)
                for (int x = 0; x < p.clipWidth; ++x) {
                    float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x);
                    for (int c = 0; c < D.channels; ++c) dst[c] = start[size_t(c)];
                }
            if (width <= 0) continue;

            const Range rows = reaching(y0, y1, offY, sY, dY, kH, E.height);
            for (int e0 = rows.first; e0 < rows.last; e0 += rowsPerProduct) {
                const int e1 = std::min(rows.last, e0 + rowsPerProduct);
                for (int g = 0; g < G; ++g) {
                    // T (pixels of rows [e0, e1) x Kg) = E_g (pixels x Cog) * W_g (Cog x Kg).
                    const int M = (e1 - e0) * width;
                    blas::sgemm(false, false, M, Kg, Cog, 1.0f, gradient + pixelIndex(E, n, e0, cols.first) + g * Cog,
                                E.pixelStride, weights + size_t(g) * Cog * Kg, Kg, 0.0f, t.data(), Kg);
                    // Scatter-add the taps that land in the band.
                    for (int ey = e0; ey < e1; ++ey)
                        for (int ex = cols.first; ex < cols.last; ++ex) {
                            const float* tp = t.data() + (size_t(ey - e0) * width + size_t(ex - cols.first)) * Kg;
                            for (int ky = 0; ky < kH; ++ky) {
                                const int y = offY + sY * ey + dY * ky;
                                if (y < y0 || y >= y1) continue;
                                for (int kx = 0; kx < kW; ++kx) {
                                    const int x = offX + sX * ex + dX * kx;
                                    if (x < 0 || x >= p.clipWidth) continue;
                                    float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x) + g * Cig;
                                    const float* v = tp + size_t(ky * kW + kx) * Cig;
                                    for (int c = 0; c < Cig; ++c) dst[c] += v[c];
                                }
                            }
                        }
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu::col2im
