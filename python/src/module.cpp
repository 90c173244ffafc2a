// The extension module mpsgrad._mpsgrad: exception mapping and one bind function per family.
#include "bindings.h"

namespace mpsgrad::python {

PYBIND11_MODULE(_mpsgrad, m) {
    m.doc() = "mpsgrad: an open implementation of Apple's MetalPerformanceShaders CNN training API";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const mpsgrad::TypeError& e) {
            PyErr_SetString(PyExc_TypeError, e.what());
        }
    });
    py::register_exception<CommandBufferError>(m, "CommandBufferError", PyExc_RuntimeError);
    bindCore(m);
    bindKernel(m);
    bindNeuron(m);
    bindConvolution(m);
    bindArithmetic(m);
    bindSoftmax(m);
    bindOptimizers(m);  // issue 14
    bindLoss(m);        // issue 14
}

}  // namespace mpsgrad::python
