// Helpers shared by the kernel serialization files (kernels/serialization*.cpp). Internal: not
// installed, not part of the public headers.
#pragma once

#include "core/errors.h"
#include "core/serialization.h"
#include "kernels/neuron.h"

namespace mpsgrad::serial_support {

// Rethrows the ValueError of a constructor or validate() as SerializationError naming `what`,
// so malformed data always surfaces as one exception type.
template <class F>
auto asSerializationError(serial::Reader& r, const char* what, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const SerializationError&) {
        throw;
    } catch (const ValueError& e) {
        r.fail(what, e.what());
    } catch (const TypeError& e) {
        r.fail(what, e.what());
    }
}

// A nested NNNeuronDescriptor object, validated (kernels/serialization.cpp).
NNNeuronDescriptor readNeuronDescriptor(serial::Reader& r, const char* what);

}  // namespace mpsgrad::serial_support
