// The extension module mpsgrad._mpsgrad: exception mapping and one bind function per family.
#include "bindings.h"

namespace mpsgrad::python {

void bindConcatenation(py::module_& m);  // concatenation.cpp
void bindBatchHelpers(py::module_& m);   // batch_helpers.cpp

PYBIND11_MODULE(_mpsgrad, m) {
    m.doc() = "mpsgrad: an open implementation of Apple's MetalPerformanceShaders CNN training API";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const mpsgrad::TypeError& e) {
            PyErr_SetString(PyExc_TypeError, e.what());
        } catch (const py::cast_error& e) {
            // A value of the wrong type reached a conversion: a TypeError, not pybind11's RuntimeError.
            PyErr_SetString(PyExc_TypeError, *e.what() ? e.what() : "an argument has the wrong type or an object "
                                                                    "was not initialized (__init__ not called)");
        }
    });
    py::register_exception<CommandBufferError>(m, "CommandBufferError", PyExc_RuntimeError);
    bindCore(m);
    bindBatchHelpers(m);  // MPSImageBatch* / MPSStateBatch* helpers, MPSStateResourceList
    bindKernel(m);
    bindNeuron(m);
    bindConvolution(m);
    bindArithmetic(m);
    bindSoftmax(m);
    bindBatchNormalization(m);  // batch normalization family
    bindNormalizationGroups(m);  // instance and group normalization
    bindOptimizers(m);  // issue 14
    bindLoss(m);        // issue 14
    bindYOLOLoss(m);    // issue 14
    // ---- pooling, upsampling, dropout families (issue 11)
    bindPooling(m);
    bindUpsampling(m);
    bindDropout(m);
    bindReshapePad(m);  // issue 13
    bindReduction(m);   // issue 13: Gram matrix, spatial mean
    bindLocalNormalization(m);  // cross-channel, spatial, local contrast normalization (issue 12)
    bindGraph(m);  // issue 15: after every family whose kernels and data sources it uses
    bindConcatenation(m);  // concatenation kernels and nodes (after the kernel and graph base classes)
    bindThreads(m);
    bindProfiler(m);
    // Drain work committed from Python before the interpreter starts finalizing.
    py::module_::import("atexit").attr("register")(py::cpp_function([] { drainCommitted(); }));
    m.def("synchronize", [] { drainCommitted(); },
          "mpsgrad extension (like torch.mps.synchronize()): waits until every command buffer committed from Python "
          "has completed and its completed handlers have run. Called from a completed handler or host callback "
          "while that wait could never return (the callback's own buffer, or a later one of its queue, is "
          "pending) it raises CommandBufferError instead. The emulated Metal device of the Linux test build "
          "runs command buffers only when the host waits, so this is what drives an execute_async there.");
    bindSerialization(m);  // keep last: it adds pickle support to every class bound above
}

}  // namespace mpsgrad::python
