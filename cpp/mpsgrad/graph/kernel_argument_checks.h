// Node construction checks with the kernel's own limits (docs/graph.md "Errors"). Internal to
// cpp/mpsgrad/graph: included by the filter node files whose constructors take kernel arguments.
#pragma once

#include "core/device.h"

namespace mpsgrad {

// The CPU device (always present) the checks build kernels on.
const Device& kernelCheckDevice();

// `make(device)` builds the node's kernel on the CPU device and drops it, so a node refuses exactly
// what its kernel refuses, with the kernel's message, when it is constructed instead of when an
// NNGraph binds it; no limit is restated in the node that could drift from the kernel's.
template <class Make>
void checkKernelArguments(Make&& make) {
    make(kernelCheckDevice());
}

}  // namespace mpsgrad
