// mpsgrad's exceptions. The Python bindings map them onto ValueError, TypeError and
// RuntimeError; C++ callers catch them directly.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpsgrad {

// A bad value: wrong size, channel count, offset, read count... (Python ValueError)
class ValueError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// An object of the wrong kind: a state from another kernel family, a missing method... (Python TypeError)
class TypeError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

// A command buffer failed or was misused (Python RuntimeError).
class CommandBufferError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
    std::ostringstream out;
    (out << ... << std::forward<Parts>(parts));
    return out.str();
}
}  // namespace detail

// Throws ValueError with the message built from `parts`, e.g.
// throwValueError("groups: ", g, " does not divide input_feature_channels ", c).
template <class... Parts>
[[noreturn]] void throwValueError(Parts&&... parts) {
    throw ValueError(detail::concat(std::forward<Parts>(parts)...));
}

template <class... Parts>
[[noreturn]] void throwTypeError(Parts&&... parts) {
    throw TypeError(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace mpsgrad
