// Helpers shared by the pybind11 binding files (one file per MPS family, mirroring
// cpp/mpsgrad/kernels).
#pragma once

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/image.h"
#include "core/kernel.h"
#include "core/state.h"
#include "conversions.h"

namespace mpsgrad {
class CNNConvolutionDataSource;
class CNNConvolutionDescriptor;
class CNNBatchNormalizationDataSource;
}  // namespace mpsgrad

namespace mpsgrad::python {

namespace py = pybind11;

void bindCore(py::module_& m);
void bindKernel(py::module_& m);
void bindNeuron(py::module_& m);
void bindConvolution(py::module_& m);
void bindArithmetic(py::module_& m);
void bindSoftmax(py::module_& m);
// ---- batch normalization family
void bindBatchNormalization(py::module_& m);
// ---- end batch normalization family
void bindNormalizationGroups(py::module_& m);  // instance and group normalization (issue 12)
void bindOptimizers(py::module_& m);  // optimizers and Vector (issue 14)
void bindLoss(py::module_& m);        // losses (issue 14)
void bindYOLOLoss(py::module_& m);    // YOLO loss (issue 14)
// ---- pooling, upsampling, dropout families (issue 11)
void bindPooling(py::module_& m);
void bindUpsampling(py::module_& m);
void bindDropout(py::module_& m);
void bindReshapePad(py::module_& m);  // reshape and pad (issue 13)
void bindReduction(py::module_& m);   // Gram matrix and spatial mean (issue 13)
// ---- cross-channel, spatial and local contrast normalization (issue 12 item 4)
void bindLocalNormalization(py::module_& m);
void bindGraph(py::module_& m);  // graph API (issue 15)

// A Python (or built-in) data source as the C++ protocol object (convolution.cpp,
// batch_normalization.cpp); TypeError naming the parameter otherwise.
std::shared_ptr<CNNConvolutionDataSource> toConvolutionDataSource(py::object object);
// A convolution descriptor as its Python class (CNNSubPixelConvolutionDescriptor when its scale factor is not 1).
py::object convolutionDescriptorObject(const CNNConvolutionDescriptor& descriptor);
std::shared_ptr<CNNBatchNormalizationDataSource> toBatchNormalizationDataSource(py::object object);

// True once the interpreter is shutting down: no Python API may be called from then on (a
// thread acquiring the GIL would be stopped by the interpreter mid-destructor).
bool pythonFinalizing();

// A Python object held by C++ (a completed handler, a kept-alive padding policy, the owner of
// zero-copy memory). Released under the GIL from any thread; deliberately leaked instead when the
// interpreter is already finalizing.
struct PythonReference {
    py::object object;
    explicit PythonReference(py::object o) : object(std::move(o)) {}
    PythonReference(const PythonReference&) = delete;
    PythonReference& operator=(const PythonReference&) = delete;
    ~PythonReference();
};

// Waits for every command buffer committed from Python that has not completed yet (registered
// with atexit, so shutdown never races work in flight).
void noteCommitted(const std::shared_ptr<CommandBuffer>& cb);
void drainCommitted();
// to_bytes / from_bytes / pickle; walks the module's classes, so it must be bound last.
void bindSerialization(py::module_& m);
void bindThreads(py::module_& m);
void bindProfiler(py::module_& m);

// A float32 NumPy array that aliases `count` floats of a buffer slice (zero copy). The
// array keeps the buffer alive.
py::array floatView(const BufferSlice& slice, std::vector<py::ssize_t> shape, std::vector<py::ssize_t> stridesInFloats = {});

// Offset / Region from an Offset or Region object or a tuple.
Offset toOffset(py::handle value, const char* what);
Region toRegion(py::handle value, const char* what);

// A list of Images (or None) → ImageBatch; TypeError naming `what` otherwise.
ImageBatch toImageBatch(py::handle value, const char* what);
StateBatch toStateBatch(py::handle value, const char* what);

// Converts array-like data to a C-contiguous float32 array, ValueError naming `what` unless
// its shape is `shape`.
py::array_t<float, py::array::c_style | py::array::forcecast> floatArrayOfShape(
    py::handle data, const std::vector<py::ssize_t>& shape, const char* what);

}  // namespace mpsgrad::python
