// Value types and enumerations of the MPS object model, with Apple's exact numeric values.
#pragma once

#include <cstdint>
#include <limits>

namespace mpsgrad {

// MPSOffset
struct Offset {
    int64_t x = 0;
    int64_t y = 0;
    int64_t z = 0;
    bool operator==(const Offset& o) const { return x == o.x && y == o.y && z == o.z; }
};

// MTLOrigin / MTLSize / MTLRegion
struct Origin {
    int64_t x = 0;
    int64_t y = 0;
    int64_t z = 0;
};
struct Size3 {
    uint64_t width = 0;
    uint64_t height = 0;
    uint64_t depth = 0;
};
struct Region {
    Origin origin;
    Size3 size;
};

// MPSRectNoClip: "the whole destination".
inline constexpr uint64_t kNoClipSize = std::numeric_limits<uint64_t>::max();
inline Region rectNoClip() { return Region{{0, 0, 0}, {kNoClipSize, kNoClipSize, kNoClipSize}}; }

// MPSImageEdgeMode
enum class ImageEdgeMode : uint32_t { Zero = 0, Clamp = 1, Mirror = 2, MirrorWithEdge = 3, Constant = 4 };

// MPSImageFeatureChannelFormat
enum class ImageFeatureChannelFormat : uint32_t { None = 0, Unorm8 = 1, Unorm16 = 2, Float16 = 3, Float32 = 4 };

// MPSDataLayout
enum class DataLayout : uint32_t { HeightxWidthxFeatureChannels = 0, FeatureChannelsxHeightxWidth = 1 };

// MPSDataType
enum class DataType : uint32_t {
    Invalid = 0,
    Float32 = 0x10000000u | 32,
    Float16 = 0x10000000u | 16,
    Int8 = 0x20000000u | 8,
    Int16 = 0x20000000u | 16,
    Int32 = 0x20000000u | 32,
    UInt8 = 8,
    UInt16 = 16,
    UInt32 = 32,
    Unorm1 = 0x40000000u | 1,
    Unorm8 = 0x40000000u | 8,
};

// MPSKernelOptions (bit mask)
enum KernelOptions : uint32_t {
    KernelOptionsNone = 0,
    KernelOptionsSkipAPIValidation = 1u << 0,
    KernelOptionsAllowReducedPrecision = 1u << 1,
    KernelOptionsDisableInternalTiling = 1u << 2,
    KernelOptionsInsertDebugGroups = 1u << 3,
    KernelOptionsVerbose = 1u << 4,
};

// MTLCommandBufferStatus
enum class CommandBufferStatus : uint32_t {
    NotEnqueued = 0,
    Enqueued = 1,
    Committed = 2,
    Scheduled = 3,
    Completed = 4,
    Error = 5,
};

// MPSStateResourceType
enum class StateResourceType : uint32_t { None = 0, Buffer = 1, Texture = 2 };

// MPSNNPaddingMethod (bit field)
namespace PaddingMethod {
inline constexpr uint32_t AlignCentered = 0;
inline constexpr uint32_t AlignTopLeft = 1;
inline constexpr uint32_t AlignBottomRight = 2;
inline constexpr uint32_t AlignMask = 3;
inline constexpr uint32_t AddRemainderToTopLeft = 0u << 2;
inline constexpr uint32_t AddRemainderToTopRight = 1u << 2;
inline constexpr uint32_t AddRemainderToBottomLeft = 2u << 2;
inline constexpr uint32_t AddRemainderToBottomRight = 3u << 2;
inline constexpr uint32_t AddRemainderToMask = 3u << 2;
inline constexpr uint32_t SizeValidOnly = 0;
inline constexpr uint32_t SizeSame = 1u << 4;
inline constexpr uint32_t SizeFull = 2u << 4;
inline constexpr uint32_t SizeReserved = 3u << 4;
inline constexpr uint32_t SizeMask = 0x7f0;
inline constexpr uint32_t CustomWhitelistForNodeFusion = 1u << 13;
inline constexpr uint32_t Custom = 1u << 14;
inline constexpr uint32_t ExcludeEdges = 1u << 15;
}  // namespace PaddingMethod

// MPSNNConvolutionAccumulatorPrecisionOption
enum class NNConvolutionAccumulatorPrecisionOption : uint32_t { Half = 0, Float = 1 };

// For 0 <= v <= INT64_MAX - 3 (sizes already validated); user-supplied counts go through
// checked::roundUpTo4, which raises instead of overflowing.
inline int64_t roundUpTo4(int64_t v) { return (v + 3) & ~int64_t(3); }

}  // namespace mpsgrad
