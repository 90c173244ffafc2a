// Controls of the CPU backend: mpsgrad.set_num_threads / get_num_threads, which BLAS the build
// uses, and the recycling of large host buffers (docs/performance.md).
#include "bindings.h"

#include <climits>

#include "backend/cpu/blas.h"
#include "backend/cpu/buffer_cache.h"
#include "backend/cpu/parallel.h"

namespace mpsgrad::python {

void bindThreads(py::module_& m) {
    m.def(
        "set_num_threads",
        [](py::object n) {
            // Any integer (Python or NumPy), not a bool.
            if (py::isinstance<py::bool_>(n) || !PyIndex_Check(n.ptr()))
                throw py::type_error("set_num_threads: n must be an int, got " +
                                     std::string(py::str(py::type::handle_of(n).attr("__name__"))));
            py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
            if (!index) throw py::error_already_set();
            int overflow = 0;
            long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
            if (overflow) value = overflow > 0 ? LLONG_MAX : LLONG_MIN;
            if (value < 1 || value > 4096)
                throw py::value_error("set_num_threads: n must be between 1 and 4096, got " +
                                      std::to_string(value));
            cpu::setThreadCount(int(value));
        },
        py::arg("n"),
        "Sets the number of threads the CPU backend runs its ops on (work committed from now on).\n\n"
        "n must be an int >= 1 (ValueError otherwise). The default comes from the environment\n"
        "variable MPSGRAD_NUM_THREADS, else the CPUs available to the process (CPU affinity and\n"
        "cgroup quota). The BLAS calls of the CPU backend run inside these threads.");
    m.def("get_num_threads", &cpu::threadCount,
          "Number of threads the CPU backend runs its ops on (see set_num_threads).");
    m.def("blas_info", [] { return std::string(cpu::blas::name()); },
          "The BLAS the CPU backend's matrix products run on: OpenBLAS (scipy-openblas32) on Linux,\n"
          "Accelerate on macOS, with its build configuration.");
    m.def("release_cached_buffers", &cpu::buffer_cache::releaseAll,
          "Frees the large host buffers the CPU backend keeps for reuse after their images were\n"
          "released (up to MPSGRAD_CPU_BUFFER_CACHE_MB MiB, default 1024; 0 turns reuse off).\n"
          "Reuse spares each allocation the page faults of fresh memory; results never depend on it.");
    m.def("cached_buffer_bytes", &cpu::buffer_cache::cachedBytes,
          "Bytes of freed host buffers the CPU backend holds for reuse (see release_cached_buffers).");
    m.def("buffer_cache_limit", &cpu::buffer_cache::budgetBytes,
          "The most bytes of freed host buffers the CPU backend keeps for reuse: MPSGRAD_CPU_BUFFER_CACHE_MB\n"
          "MiB (read at import; default 1024), 0 when reuse is off (always in AddressSanitizer builds).");
}

}  // namespace mpsgrad::python
