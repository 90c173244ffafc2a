// Reading a data source between its load and purge (the MPS data source protocols' -load and
// -purge), shared by the normalization families. Internal to cpp/mpsgrad/kernels.
#pragma once

#include <cstdio>
#include <exception>
#include <utility>

#include "core/errors.h"

namespace mpsgrad {

// Runs `body` between source.load() and source.purge(); ValueError when load() returns false.
// purge() runs from a destructor (also when `body` throws), where an exception would terminate
// the process: a failing purge (a Python data source raising, say) is reported on stderr and the
// kernel keeps what `body` copied, as the convolution's loadWeights does.
template <class Source, class Body>
void withLoaded(Source& source, Body&& body) {
    if (!source.load()) throwValueError("data_source: load() returned False");
    struct Purge {
        Source& s;
        ~Purge() {
            try {
                s.purge();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "mpsgrad: warning: the data source's purge() failed: %s\n", e.what());
            } catch (...) {
                std::fprintf(stderr, "mpsgrad: warning: the data source's purge() failed\n");
            }
        }
    } purgeOnExit{source};
    std::forward<Body>(body)();
}

}  // namespace mpsgrad
