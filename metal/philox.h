// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// the counter-based generator behind CNNDropout's masks. One header for the CPU backend and the
// .metal kernels, so both compute the same bits: a pure function of a 128-bit counter and a 64-bit
// key, with only 32-bit multiplies, xors and adds.
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct PhiloxWords {
    uint32_t v0;
    uint32_t v1;
    uint32_t v2;
    uint32_t v3;
};

// The high 32 bits of the 64-bit product a * b. Written with a 64-bit multiply in both languages
// (MSL has 64-bit `ulong` arithmetic) rather than MSL's mulhi, so the host code and every kernel
// compiler see the same expression.
inline uint32_t philoxMulHi(uint32_t a, uint32_t b) {
#ifdef __METAL_VERSION__
    return uint32_t((ulong(a) * ulong(b)) >> 32);
#else
    return uint32_t((uint64_t(a) * uint64_t(b)) >> 32);
#endif
}

inline PhiloxWords philoxRound(PhiloxWords c, uint32_t k0, uint32_t k1) {
    const uint32_t m0 = 0xD2511F53u;
    const uint32_t m1 = 0xCD9E8D57u;
    const uint32_t hi0 = philoxMulHi(m0, c.v0);
    const uint32_t lo0 = m0 * c.v0;
    const uint32_t hi1 = philoxMulHi(m1, c.v2);
    const uint32_t lo1 = m1 * c.v2;
    PhiloxWords r;
    r.v0 = hi1 ^ c.v1 ^ k0;
    r.v1 = lo1;
    r.v2 = hi0 ^ c.v3 ^ k1;
    r.v3 = lo0;
    return r;
}

// Philox4x32 with 10 rounds: the key is bumped by the Weyl constants between rounds.
inline PhiloxWords philox4x32_10(PhiloxWords counter, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        counter = philoxRound(counter, k0, k1);
    }
    return counter;
}

inline uint32_t philoxWord(PhiloxWords w, uint32_t index) {
    return index == 0u ? w.v0 : (index == 1u ? w.v1 : (index == 2u ? w.v2 : w.v3));
}

}  // namespace mpsgrad
