// Internal to the Metal backend: an owning reference to an Objective-C object of metal-cpp.
//
// metal-cpp's own NS::SharedPtr releases (and copies by retaining) without checking for null,
// relying on Objective-C's "messages to nil do nothing". In C++ that is a member call through a
// null pointer: undefined behaviour that clang optimises on (at -O2 it turned the cleanup of an
// empty SharedPtr on an exception path into unreachable code). Ref checks.
#pragma once

#include <utility>

namespace mpsgrad::metal_backend {

template <class T>
class Ref {
public:
    Ref() = default;
    ~Ref() { reset(); }

    Ref(const Ref& other) : object_(other.object_) {
        if (object_) object_->retain();
    }
    Ref(Ref&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
    Ref& operator=(Ref other) noexcept {
        std::swap(object_, other.object_);
        return *this;
    }

    T* get() const { return object_; }
    T* operator->() const { return object_; }
    explicit operator bool() const { return object_ != nullptr; }

    void reset() {
        if (object_) std::exchange(object_, nullptr)->release();
    }

    template <class U>
    friend Ref<U> adopt(U* object);
    template <class U>
    friend Ref<U> retain(U* object);

private:
    T* object_ = nullptr;
};

// Takes ownership of an object returned by new..., alloc/init or Create... (already +1).
template <class T>
Ref<T> adopt(T* object) {
    Ref<T> ref;
    ref.object_ = object;
    return ref;
}

// Retains an object returned autoreleased (any other method), to keep it past its pool.
template <class T>
Ref<T> retain(T* object) {
    Ref<T> ref;
    ref.object_ = object;
    if (object) object->retain();
    return ref;
}

}  // namespace mpsgrad::metal_backend
