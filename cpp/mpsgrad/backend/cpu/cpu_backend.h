// The CPU backend: host memory, an in-order worker thread per command queue, and the
// compute functions of cpu_ops.h run as encoded work items.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace mpsgrad {

std::shared_ptr<Backend> makeCpuBackend();

}  // namespace mpsgrad
