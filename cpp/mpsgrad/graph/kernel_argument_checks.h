// Node construction checks with the kernel's own limits (docs/graph.md "Errors"). Internal to
// cpp/mpsgrad/graph: included by the filter node files whose constructors take kernel arguments.
#pragma once

#include "core/device.h"
#include "core/errors.h"

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

// The same for a node whose parameter `parameter` stands for kernel arguments of other names (a
// spatial window's kernel_size for its kernel_width and kernel_height): the message names both.
template <class Make>
void checkKernelArguments(const char* parameter, Make&& make) {
    try {
        make(kernelCheckDevice());
    } catch (const ValueError& e) {
        throwValueError(parameter, ": ", e.what());
    }
}

}  // namespace mpsgrad
