// The profiler's switch and its events (core/profiler.h); mpsgrad/profiler.py builds
// mpsgrad.profile() on these.
#include "bindings.h"

#include "core/profiler.h"

namespace mpsgrad::python {

void bindProfiler(py::module_& m) {
    m.def("_profiler_set_enabled", &profiler::setEnabled, py::arg("on"),
          "Switches the profiler on (clearing its events) or off; see mpsgrad.profile().");
    m.def("_profiler_enabled", &profiler::enabled);
    m.def(
        "_profiler_take",
        [] {
            py::list events;
            for (const auto& e : profiler::take())
                events.append(py::make_tuple(e.op, e.scope, e.backend, e.commandBuffer, e.startMicros, e.wallMicros,
                                             e.cpuMicros, e.thread));
            return events;
        },
        "The events recorded since the last call, as tuples (op, scope, backend, command_buffer,\n"
        "start_us, wall_us, cpu_us, thread), and forgets them.");
}

}  // namespace mpsgrad::python
