"""
mpsgrad: an open implementation of Apple's MetalPerformanceShaders CNN training API
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['CNNAdd', 'CNNAddGradient', 'CNNArithmetic', 'CNNArithmeticGradient', 'CNNArithmeticGradientState', 'CNNBatchNormalization', 'CNNBatchNormalizationDataSource', 'CNNBatchNormalizationFlags', 'CNNBatchNormalizationGradient', 'CNNBatchNormalizationGradientNode', 'CNNBatchNormalizationNode', 'CNNBatchNormalizationState', 'CNNBatchNormalizationStatistics', 'CNNBatchNormalizationStatisticsGradient', 'CNNBatchNormalizationWeightsDataSource', 'CNNBinaryKernel', 'CNNConcatenation', 'CNNConcatenationGradient', 'CNNConvolution', 'CNNConvolutionDataSource', 'CNNConvolutionDescriptor', 'CNNConvolutionGradient', 'CNNConvolutionGradientNode', 'CNNConvolutionGradientOption', 'CNNConvolutionGradientState', 'CNNConvolutionGradientStateNode', 'CNNConvolutionNode', 'CNNConvolutionTranspose', 'CNNConvolutionTransposeGradient', 'CNNConvolutionTransposeGradientNode', 'CNNConvolutionTransposeGradientState', 'CNNConvolutionTransposeGradientStateNode', 'CNNConvolutionTransposeNode', 'CNNConvolutionWeightsAndBiasesState', 'CNNConvolutionWeightsDataSource', 'CNNCrossChannelNormalization', 'CNNCrossChannelNormalizationGradient', 'CNNCrossChannelNormalizationGradientNode', 'CNNCrossChannelNormalizationNode', 'CNNDepthWiseConvolutionDescriptor', 'CNNDilatedPoolingMax', 'CNNDilatedPoolingMaxGradient', 'CNNDilatedPoolingMaxGradientNode', 'CNNDilatedPoolingMaxNode', 'CNNDivide', 'CNNDivideGradient', 'CNNDropout', 'CNNDropoutGradient', 'CNNDropoutGradientNode', 'CNNDropoutGradientState', 'CNNDropoutNode', 'CNNFullyConnected', 'CNNFullyConnectedGradient', 'CNNFullyConnectedGradientNode', 'CNNFullyConnectedNode', 'CNNGradientKernel', 'CNNGroupNormalization', 'CNNGroupNormalizationDataSource', 'CNNGroupNormalizationGradient', 'CNNGroupNormalizationGradientNode', 'CNNGroupNormalizationGradientState', 'CNNGroupNormalizationNode', 'CNNGroupNormalizationWeightsDataSource', 'CNNInstanceNormalization', 'CNNInstanceNormalizationDataSource', 'CNNInstanceNormalizationGradient', 'CNNInstanceNormalizationGradientNode', 'CNNInstanceNormalizationGradientState', 'CNNInstanceNormalizationNode', 'CNNInstanceNormalizationWeightsDataSource', 'CNNKernel', 'CNNLocalContrastNormalization', 'CNNLocalContrastNormalizationGradient', 'CNNLocalContrastNormalizationGradientNode', 'CNNLocalContrastNormalizationNode', 'CNNLocalNormalizationGradientNode', 'CNNLocalNormalizationGradientState', 'CNNLogSoftMax', 'CNNLogSoftMaxGradient', 'CNNLogSoftMaxGradientNode', 'CNNLogSoftMaxNode', 'CNNLoss', 'CNNLossDataDescriptor', 'CNNLossDescriptor', 'CNNLossLabels', 'CNNLossNode', 'CNNLossType', 'CNNMultiaryKernel', 'CNNMultiply', 'CNNMultiplyGradient', 'CNNNeuron', 'CNNNeuronAbsolute', 'CNNNeuronAbsoluteNode', 'CNNNeuronELU', 'CNNNeuronELUNode', 'CNNNeuronExponential', 'CNNNeuronExponentialNode', 'CNNNeuronGeLUNode', 'CNNNeuronGradient', 'CNNNeuronGradientNode', 'CNNNeuronGradientState', 'CNNNeuronHardSigmoid', 'CNNNeuronHardSigmoidNode', 'CNNNeuronLinear', 'CNNNeuronLinearNode', 'CNNNeuronLogarithm', 'CNNNeuronLogarithmNode', 'CNNNeuronNode', 'CNNNeuronPReLU', 'CNNNeuronPReLUNode', 'CNNNeuronPower', 'CNNNeuronPowerNode', 'CNNNeuronReLU', 'CNNNeuronReLUN', 'CNNNeuronReLUNNode', 'CNNNeuronReLUNode', 'CNNNeuronSigmoid', 'CNNNeuronSigmoidNode', 'CNNNeuronSoftPlus', 'CNNNeuronSoftPlusNode', 'CNNNeuronSoftSign', 'CNNNeuronSoftSignNode', 'CNNNeuronTanH', 'CNNNeuronTanHNode', 'CNNNeuronType', 'CNNNormalizationGammaAndBetaState', 'CNNNormalizationMeanAndVarianceState', 'CNNNormalizationNode', 'CNNPooling', 'CNNPoolingAverage', 'CNNPoolingAverageGradient', 'CNNPoolingAverageGradientNode', 'CNNPoolingAverageNode', 'CNNPoolingGradient', 'CNNPoolingGradientNode', 'CNNPoolingGradientState', 'CNNPoolingL2Norm', 'CNNPoolingL2NormGradient', 'CNNPoolingL2NormGradientNode', 'CNNPoolingL2NormNode', 'CNNPoolingMax', 'CNNPoolingMaxGradient', 'CNNPoolingMaxGradientNode', 'CNNPoolingMaxNode', 'CNNPoolingNode', 'CNNReductionType', 'CNNSoftMax', 'CNNSoftMaxGradient', 'CNNSoftMaxGradientNode', 'CNNSoftMaxGradientState', 'CNNSoftMaxNode', 'CNNSpatialNormalization', 'CNNSpatialNormalizationGradient', 'CNNSpatialNormalizationGradientNode', 'CNNSpatialNormalizationNode', 'CNNSubPixelConvolutionDescriptor', 'CNNSubtract', 'CNNSubtractGradient', 'CNNUpsampling', 'CNNUpsamplingBilinear', 'CNNUpsamplingBilinearGradient', 'CNNUpsamplingBilinearGradientNode', 'CNNUpsamplingBilinearNode', 'CNNUpsamplingGradient', 'CNNUpsamplingGradientNode', 'CNNUpsamplingGradientState', 'CNNUpsamplingNearest', 'CNNUpsamplingNearestGradient', 'CNNUpsamplingNearestGradientNode', 'CNNUpsamplingNearestNode', 'CNNUpsamplingNode', 'CNNYOLOLoss', 'CNNYOLOLossDescriptor', 'CNNYOLOLossNode', 'CommandBuffer', 'CommandBufferError', 'CommandBufferStatus', 'CommandQueue', 'DataLayout', 'DataType', 'Device', 'Image', 'ImageAllocator', 'ImageCoordinate', 'ImageDescriptor', 'ImageEdgeMode', 'ImageFeatureChannelFormat', 'Kernel', 'LocalNormalizationKind', 'NNAdditionGradientNode', 'NNAdditionNode', 'NNArithmeticGradientNode', 'NNArithmeticGradientStateNode', 'NNBinaryArithmeticNode', 'NNBinaryGradientState', 'NNBinaryGradientStateNode', 'NNCompare', 'NNComparisonType', 'NNConcatenationGradientNode', 'NNConcatenationNode', 'NNConvolutionAccumulatorPrecisionOption', 'NNDefaultPadding', 'NNDivisionNode', 'NNFilterNode', 'NNForwardLoss', 'NNForwardLossNode', 'NNGradientFilterNode', 'NNGradientState', 'NNGradientStateNode', 'NNGramMatrixCalculation', 'NNGramMatrixCalculationGradient', 'NNGramMatrixCalculationGradientNode', 'NNGramMatrixCalculationGradientState', 'NNGramMatrixCalculationNode', 'NNGraph', 'NNImageNode', 'NNInitialGradient', 'NNInitialGradientNode', 'NNLabelsNode', 'NNLossGradient', 'NNLossGradientNode', 'NNLossKernel', 'NNMultiaryGradientState', 'NNMultiaryGradientStateNode', 'NNMultiplicationGradientNode', 'NNMultiplicationNode', 'NNNeuronDescriptor', 'NNOptimizer', 'NNOptimizerAdam', 'NNOptimizerDescriptor', 'NNOptimizerRMSProp', 'NNOptimizerStochasticGradientDescent', 'NNPad', 'NNPadGradient', 'NNPadGradientNode', 'NNPadGradientState', 'NNPadNode', 'NNPadding', 'NNReductionSpatialMean', 'NNReductionSpatialMeanGradient', 'NNReductionSpatialMeanGradientNode', 'NNReductionSpatialMeanGradientState', 'NNReductionSpatialMeanNode', 'NNRegularizationType', 'NNReshape', 'NNReshapeGradient', 'NNReshapeGradientNode', 'NNReshapeGradientState', 'NNReshapeNode', 'NNStateNode', 'NNSubtractionGradientNode', 'NNSubtractionNode', 'NNTrainingStyle', 'NNUnaryReductionNode', 'Offset', 'PoolingKind', 'RECT_NO_CLIP', 'Region', 'SerializationError', 'State', 'StateResourceList', 'StateResourceType', 'TemporaryImage', 'UpsamplingCoordinateMode', 'Vector', 'VectorDescriptor', 'batch_from_numpy', 'blas_info', 'buffer_cache_limit', 'cached_buffer_bytes', 'get_num_threads', 'image_batch_increment_read_count', 'image_batch_iterate', 'image_batch_resource_size', 'image_batch_synchronize', 'padding_destination_size', 'padding_offset', 'release_cached_buffers', 'set_num_threads', 'state_batch_increment_read_count', 'state_batch_resource_size', 'state_batch_synchronize', 'supports_mtl_device', 'synchronize']
class CommandBufferError(RuntimeError):
    pass
class ImageEdgeMode:
    """
    MPSImageEdgeMode
    
    Members:
    
      ZERO
    
      CLAMP
    
      MIRROR
    
      MIRROR_WITH_EDGE
    
      CONSTANT
    """
    CLAMP: typing.ClassVar[ImageEdgeMode]
    CONSTANT: typing.ClassVar[ImageEdgeMode]
    MIRROR: typing.ClassVar[ImageEdgeMode]
    MIRROR_WITH_EDGE: typing.ClassVar[ImageEdgeMode]
    ZERO: typing.ClassVar[ImageEdgeMode]
    __members__: typing.ClassVar[dict[str, ImageEdgeMode]]
    @typing.overload
    def __eq__(self, other: ImageEdgeMode) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: ImageEdgeMode) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class ImageFeatureChannelFormat:
    """
    MPSImageFeatureChannelFormat
    
    Members:
    
      NONE
    
      UNORM8
    
      UNORM16
    
      FLOAT16
    
      FLOAT32
    """
    FLOAT16: typing.ClassVar[ImageFeatureChannelFormat]
    FLOAT32: typing.ClassVar[ImageFeatureChannelFormat]
    NONE: typing.ClassVar[ImageFeatureChannelFormat]
    UNORM16: typing.ClassVar[ImageFeatureChannelFormat]
    UNORM8: typing.ClassVar[ImageFeatureChannelFormat]
    __members__: typing.ClassVar[dict[str, ImageFeatureChannelFormat]]
    @typing.overload
    def __eq__(self, other: ImageFeatureChannelFormat) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: ImageFeatureChannelFormat) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class DataLayout:
    """
    MPSDataLayout
    
    Members:
    
      HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
    
      FEATURE_CHANNELS_X_HEIGHT_X_WIDTH
    """
    FEATURE_CHANNELS_X_HEIGHT_X_WIDTH: typing.ClassVar[DataLayout]
    HEIGHT_X_WIDTH_X_FEATURE_CHANNELS: typing.ClassVar[DataLayout]
    __members__: typing.ClassVar[dict[str, DataLayout]]
    @typing.overload
    def __eq__(self, other: DataLayout) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: DataLayout) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class DataType:
    """
    MPSDataType
    
    Members:
    
      INVALID
    
      FLOAT32
    
      FLOAT16
    
      INT8
    
      INT16
    
      INT32
    
      UINT8
    
      UINT16
    
      UINT32
    
      UNORM1
    
      UNORM8
    """
    FLOAT16: typing.ClassVar[DataType]
    FLOAT32: typing.ClassVar[DataType]
    INT16: typing.ClassVar[DataType]
    INT32: typing.ClassVar[DataType]
    INT8: typing.ClassVar[DataType]
    INVALID: typing.ClassVar[DataType]
    UINT16: typing.ClassVar[DataType]
    UINT32: typing.ClassVar[DataType]
    UINT8: typing.ClassVar[DataType]
    UNORM1: typing.ClassVar[DataType]
    UNORM8: typing.ClassVar[DataType]
    __members__: typing.ClassVar[dict[str, DataType]]
    @typing.overload
    def __eq__(self, other: DataType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: DataType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CommandBufferStatus:
    """
    MTLCommandBufferStatus
    
    Members:
    
      NOT_ENQUEUED
    
      ENQUEUED
    
      COMMITTED
    
      SCHEDULED
    
      COMPLETED
    
      ERROR
    """
    COMMITTED: typing.ClassVar[CommandBufferStatus]
    COMPLETED: typing.ClassVar[CommandBufferStatus]
    ENQUEUED: typing.ClassVar[CommandBufferStatus]
    ERROR: typing.ClassVar[CommandBufferStatus]
    NOT_ENQUEUED: typing.ClassVar[CommandBufferStatus]
    SCHEDULED: typing.ClassVar[CommandBufferStatus]
    __members__: typing.ClassVar[dict[str, CommandBufferStatus]]
    @typing.overload
    def __eq__(self, other: CommandBufferStatus) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CommandBufferStatus) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class StateResourceList:
    """
    MPSStateResourceList: the buffers a new State gets (State(device, resource_list=...), State.temporary(command_buffer, resource_list=...)).
    """
    def __init__(self, buffer_sizes: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None) -> None:
        """
        +[MPSStateResourceList resourceList] (no argument) / +resourceListWithBufferSizes: (a list of byte sizes, each > 0)
        """
    def __len__(self) -> int:
        ...
    def __repr__(self) -> str:
        ...
    def append_buffer(self, size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        -[MPSStateResourceList appendBuffer:] (size in bytes, > 0)
        """
    @property
    def buffer_sizes(self) -> list[int]:
        """
        The byte sizes listed, in order.
        """
class StateResourceType:
    """
    MPSStateResourceType
    
    Members:
    
      NONE
    
      BUFFER
    
      TEXTURE
    """
    BUFFER: typing.ClassVar[StateResourceType]
    NONE: typing.ClassVar[StateResourceType]
    TEXTURE: typing.ClassVar[StateResourceType]
    __members__: typing.ClassVar[dict[str, StateResourceType]]
    @typing.overload
    def __eq__(self, other: StateResourceType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: StateResourceType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class Offset:
    """
    MPSOffset {x, y, z}
    """
    __hash__: typing.ClassVar[None] = None
    def __eq__(self, arg0: typing.Any) -> bool:
        ...
    def __init__(self, x: typing.SupportsInt = 0, y: typing.SupportsInt = 0, z: typing.SupportsInt = 0) -> None:
        ...
    def __iter__(self) -> collections.abc.Iterator:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def x(self) -> int:
        ...
    @x.setter
    def x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def y(self) -> int:
        ...
    @y.setter
    def y(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def z(self) -> int:
        ...
    @z.setter
    def z(self, arg1: typing.SupportsInt) -> None:
        ...
class Region:
    """
    MTLRegion {origin (x, y, z), size (width, height, depth)}
    """
    @classmethod
    def _from_fields(cls: typing.Any, x: typing.SupportsInt | typing.SupportsIndex, y: typing.SupportsInt | typing.SupportsIndex, z: typing.SupportsInt | typing.SupportsIndex, width: typing.SupportsInt | typing.SupportsIndex, height: typing.SupportsInt | typing.SupportsIndex, depth: typing.SupportsInt | typing.SupportsIndex) -> Region:
        """
        Unpickling helper: a Region from its six fields (sizes up to 2**64 - 1).
        """
    def __init__(self, origin: typing.Any, size: typing.Any) -> None:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def origin(self) -> tuple[int, int, int]:
        ...
    @property
    def size(self) -> tuple[int, int, int]:
        ...
class Device:
    """
    A compute device: 'cpu', or 'metal' (MTLDevice) where the build has it.
    """
    @staticmethod
    def available() -> list[str]:
        """
        Names of the devices this build and machine provide.
        """
    @staticmethod
    def default() -> Device:
        """
        MTLCreateSystemDefaultDevice: Metal where present, else the CPU.
        """
    def __eq__(self, arg0: Device) -> bool:
        ...
    def __hash__(self) -> int:
        ...
    def __init__(self, name: str) -> None:
        """
        Device('cpu') or Device('metal')
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
class CommandBuffer:
    """
    MTLCommandBuffer
    """
    label: str
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def add_completed_handler(self, handler: collections.abc.Callable) -> None:
        """
        -[MTLCommandBuffer addCompletedHandler:]: handler(command_buffer) runs once the work is done.
        """
    def commit(self) -> None:
        """
        -[MTLCommandBuffer commit]: submit the encoded work (asynchronous).
        """
    def encode_host_callback(self, callback: collections.abc.Callable[[], typing.Any]) -> None:
        """
        mpsgrad extension (docs/metal.md "Host points"): callback() runs on a host thread once all the work encoded before this call has completed and before any work encoded after it starts (it may read and write that work's images and states). An exception fails the command buffer: status ERROR, error 'host callback failed: ...', CommandBufferError at the wait. Waiting in it for this command buffer (wait_until_completed or mpsgrad.synchronize) or a later one of its queue could never return, so it raises CommandBufferError.
        """
    def fail_on_commit(self, message: str = '') -> None:
        """
        Test hook (not in Metal): when committed, the buffer fails with `message` instead of running its work: status ERROR, error set, handlers run, wait_until_completed raises CommandBufferError. See docs/verification.md.
        """
    def wait_until_completed(self) -> None:
        """
        -[MTLCommandBuffer waitUntilCompleted]; raises CommandBufferError when the work failed.
        """
    @property
    def device(self) -> Device:
        ...
    @property
    def error(self) -> typing.Any:
        """
        MTLCommandBuffer.error: the failure's description, or None
        """
    @property
    def status(self) -> CommandBufferStatus:
        """
        MTLCommandBuffer.status
        """
class CommandQueue:
    """
    MTLCommandQueue
    """
    label: str
    def __init__(self, device: Device | str = None) -> None:
        """
        -[MTLDevice newCommandQueue]
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def command_buffer(self) -> CommandBuffer:
        """
        -[MTLCommandQueue commandBuffer]
        """
    @property
    def device(self) -> Device:
        ...
class ImageDescriptor:
    """
    MPSImageDescriptor
    """
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any) -> typing.Any:
        """
        The object from to_bytes() data. SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, width: typing.SupportsInt = 1, height: typing.SupportsInt = 1, feature_channels: typing.SupportsInt = 1, number_of_images: typing.SupportsInt = 1, channel_format: typing.Any = ..., usage: typing.SupportsInt = 3) -> None:
        """
        +[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:numberOfImages:usage:]
        """
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __repr__(self) -> str:
        ...
    def to_bytes(self) -> bytes:
        """
        The object as bytes (docs/serialization.md).
        """
    @property
    def channel_format(self) -> ImageFeatureChannelFormat:
        ...
    @channel_format.setter
    def channel_format(self, arg1: typing.Any) -> None:
        ...
    @property
    def feature_channels(self) -> int:
        ...
    @feature_channels.setter
    def feature_channels(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def height(self) -> int:
        ...
    @height.setter
    def height(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def number_of_images(self) -> int:
        ...
    @number_of_images.setter
    def number_of_images(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def usage(self) -> int:
        ...
    @usage.setter
    def usage(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def width(self) -> int:
        ...
    @width.setter
    def width(self, arg1: typing.SupportsInt) -> None:
        ...
class Image:
    """
    MPSImage: float32, float16, unorm8 or unorm16 feature channels, NHWC storage.
    """
    label: str
    @staticmethod
    def _from_array_zero_copy(array: numpy.ndarray, device: Device | str = None) -> Image:
        ...
    @staticmethod
    def from_dlpack(obj, device = None):
        """
        Image from any DLPack producer (NumPy, PyTorch, ...): zero copy for C-contiguous float32, float16,
            uint8 (UNORM8) or uint16 (UNORM16) (n, height, width, channels) CPU tensors with channels a multiple of 4 on the CPU device,
            otherwise a copy. 3-D (height, width, channels) input gives one image.
        """
    @staticmethod
    def from_numpy(array: typing.Any, device: Device | str | None = None, channel_format: ImageFeatureChannelFormat | None = None) -> Image:
        """
        A new image holding a copy of a (height, width, channels) or (n, height, width, channels) array; channel_format None takes the array's dtype (float16 -> FLOAT16, uint8 -> UNORM8, uint16 -> UNORM16, else FLOAT32); values are written as write_bytes writes them.
        """
    def __array__(self, dtype = None, copy = None):
        ...
    def __dlpack__(self, stream = None, **kwargs):
        """
        DLPack export (zero copy): a (number_of_images, height, width, channels) tensor of the storage's
            dtype (float32, float16 for FLOAT16, uint8 for UNORM8, uint16 for UNORM16).
        """
    def __dlpack_device__(self):
        ...
    def __init__(self, device: Device | str, image_descriptor: typing.Any) -> None:
        """
        -[MPSImage initWithDevice:imageDescriptor:]
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def _numpy_view(self) -> numpy.ndarray:
        """
        Zero-copy (n, height, width, channels) view of the storage.
        """
    def batch_representation(self) -> list[Image]:
        """
        -[MPSImage batchRepresentation]
        """
    def read_bytes(self, data_layout: DataLayout = ..., image_index: typing.SupportsInt | typing.SupportsIndex = 0, feature_channel_offset: typing.SupportsInt | typing.SupportsIndex = 0, number_of_feature_channels: typing.Any = None) -> numpy.ndarray:
        """
        -[MPSImage readBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:] → an array (height, width, channels) or (channels, height, width) of the storage's dtype, values as stored (float32, float16, uint8 for UNORM8, uint16 for UNORM16). Host reads follow Metal (docs/user_guide.md "Reading results"): CommandBufferError while a command buffer that has not completed writes the image, ValueError for a temporary image once its command buffer completed.
        """
    def sub_image_with_feature_channel_range(self, location: typing.SupportsInt | typing.SupportsIndex, length: typing.SupportsInt | typing.SupportsIndex) -> Image:
        """
        -[MPSImage subImageWithFeatureChannelRange:] (aliases the storage)
        """
    def synchronize_on_command_buffer(self, command_buffer: CommandBuffer) -> None:
        """
        -[MPSImage synchronizeOnCommandBuffer:]
        """
    def to_numpy(self) -> numpy.ndarray:
        """
        A copy of the image as an array (number_of_images, height, width, feature_channels) of the storage's dtype, values as stored: float32, float16 (FLOAT16), uint8 (UNORM8) or uint16 (UNORM16). Host reads follow Metal, as for read_bytes.
        """
    def write_bytes(self, data: typing.Any, data_layout: DataLayout = ..., image_index: typing.SupportsInt | typing.SupportsIndex = 0, feature_channel_offset: typing.SupportsInt | typing.SupportsIndex = 0, number_of_feature_channels: typing.Any = None) -> None:
        """
        -[MPSImage writeBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:]; `data` must have exactly the shape of the region written (or as many float32 bytes). An array of the storage's dtype is stored as it is; other floating-point values are rounded (FLOAT16: to nearest even; UNORM: clamped to [0, 1], times 255 or 65535, to nearest even, NaN to 0). uint8 / uint16 arrays into FLOAT32 or FLOAT16 storage, and non-float arrays into UNORM storage, raise TypeError.
        """
    @property
    def device(self) -> Device:
        ...
    @property
    def feature_channel_format(self) -> ImageFeatureChannelFormat:
        ...
    @property
    def feature_channels(self) -> int:
        ...
    @property
    def height(self) -> int:
        ...
    @property
    def is_temporary(self) -> bool:
        ...
    @property
    def number_of_images(self) -> int:
        ...
    @property
    def parent(self) -> Image:
        ...
    @property
    def pixel_size(self) -> int:
        ...
    @property
    def precision(self) -> int:
        ...
    @property
    def resource_size(self) -> int:
        """
        -[MPSImage resourceSize]
        """
    @property
    def shape(self) -> tuple[int, int, int, int]:
        """
        (number_of_images, height, width, feature_channels)
        """
    @property
    def usage(self) -> int:
        ...
    @property
    def width(self) -> int:
        ...
class TemporaryImage(Image):
    """
    MPSTemporaryImage
    """
    def __init__(self, command_buffer: CommandBuffer, image_descriptor: ImageDescriptor) -> None:
        """
        +[MPSTemporaryImage temporaryImageWithCommandBuffer:imageDescriptor:]
        """
    @property
    def read_count(self) -> int:
        """
        MPSTemporaryImage.readCount: reads left before the storage is released
        """
    @read_count.setter
    def read_count(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class ImageAllocator:
    """
    MPSImageAllocator; subclass and implement image_for_command_buffer(cb, descriptor, kernel)
    """
    @staticmethod
    def persistent() -> ImageAllocator:
        """
        +[MPSImage defaultAllocator]
        """
    @staticmethod
    def temporary() -> ImageAllocator:
        """
        +[MPSTemporaryImage defaultAllocator]
        """
    @classmethod
    def _builtin(cls: typing.Any, which: str) -> ImageAllocator:
        """
        Unpickling helper: a built-in allocator by name.
        """
    def __init__(self) -> None:
        ...
    def __reduce__(self) -> typing.Any:
        """
        Pickle support: the built-in objects by name; a Python subclass as cls() plus its __dict__.
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support: the built-in objects by name; a Python subclass as cls() plus its __dict__.
        """
class State:
    """
    MPSState: buffers with a read count
    """
    label: str
    @staticmethod
    def temporary(command_buffer: CommandBuffer, buffer_sizes: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [], resource_list: StateResourceList | None = None) -> State:
        """
        +[MPSState temporaryStateWithCommandBuffer:bufferSize:] / ...resourceList: (buffer_sizes, or a StateResourceList)
        """
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any, device: Device | str = None) -> typing.Any:
        """
        A persistent state from to_bytes() data, on `device`. SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, device: Device | str, buffer_size: typing.SupportsInt | typing.SupportsIndex = 0, resource_list: StateResourceList | None = None) -> None:
        """
        -[MPSState initWithDevice:bufferSize:] / -initWithDevice:resourceList: (a StateResourceList)
        """
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __repr__(self) -> str:
        ...
    def buffer_at_index(self, index: typing.SupportsInt | typing.SupportsIndex) -> numpy.ndarray:
        """
        -[MPSState resourceAtIndex:allocateMemory:] as a float32 NumPy view (from the resource's offset to the end of its buffer)
        """
    def buffer_size_at_index(self, index: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def resource_type_at_index(self, index: typing.SupportsInt | typing.SupportsIndex) -> StateResourceType:
        ...
    def synchronize_on_command_buffer(self, command_buffer: CommandBuffer) -> None:
        """
        -[MPSState synchronizeOnCommandBuffer:]
        """
    def vector_at_index(self, index: typing.SupportsInt | typing.SupportsIndex, length: typing.SupportsInt | typing.SupportsIndex | None = None) -> Vector:
        """
        [[MPSVector alloc] initWithBuffer:[state resourceAtIndex:index allocateMemory:YES] descriptor:...]: a Vector of `length` floats (None: to the end of the buffer) that aliases the resource, so an optimizer can read or update it in place
        """
    def to_bytes(self) -> bytes:
        """
        The state as bytes: persistent State (label, buffers) and CNNConvolutionWeightsAndBiasesState (label, descriptor, weights, biases). ValueError for a temporary state, TypeError for gradient states.
        """
    @property
    def device(self) -> Device:
        ...
    @property
    def is_temporary(self) -> bool:
        ...
    @property
    def read_count(self) -> int:
        """
        MPSState.readCount
        """
    @read_count.setter
    def read_count(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def resource_count(self) -> int:
        ...
    @property
    def resource_size(self) -> int:
        ...
class NNGradientState(State):
    """
    MPSNNGradientState
    """
class NNBinaryGradientState(State):
    """
    MPSNNBinaryGradientState
    """
class Kernel:
    """
    MPSKernel
    """
    label: str
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any, device: Device | str = None, padding: typing.Any = None, destination_image_allocator: typing.Any = None) -> typing.Any:
        """
        -initWithCoder:device: a kernel from to_bytes() data, rebuilt on `device` (a Device, 'cpu', 'metal' or None for the default). Called on a subclass, the data must hold that class. `padding` / `destination_image_allocator` give back a custom policy the data references (pickle passes them). Raises SerializationError (a ValueError) for malformed data.
        """
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol): the to_bytes() data plus any custom padding policy or image allocator, which Python pickles itself.
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol): the to_bytes() data plus any custom padding policy or image allocator, which Python pickles itself.
        """
    def to_bytes(self) -> bytes:
        """
        -encodeWithCoder: the kernel as bytes (constructor arguments, weights included, and every property; docs/serialization.md). TypeError for a kernel class that is not serializable, ValueError for a custom padding policy or image allocator (pickle handles those).
        """
    @property
    def device(self) -> Device:
        ...
    @property
    def options(self) -> int:
        """
        MPSKernel.options (KernelOptions bits)
        """
    @options.setter
    def options(self, arg1: typing.SupportsInt) -> None:
        ...
class NNPadding:
    """
    @protocol MPSNNPadding. Subclass it and implement padding_method(); with the CUSTOM bit also destination_image_descriptor(source_images, source_states, kernel, suggested) -> ImageDescriptor.
    """
    def __init__(self) -> None:
        ...
    def __reduce__(self) -> typing.Any:
        """
        Pickle support: the built-in objects by name; a Python subclass as cls() plus its __dict__.
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support: the built-in objects by name; a Python subclass as cls() plus its __dict__.
        """
    def destination_image_descriptor(self, source_images: collections.abc.Sequence[Image], source_states: collections.abc.Sequence[State], kernel: Kernel, suggested: ImageDescriptor) -> ImageDescriptor:
        """
        -destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:
        """
    def inverse(self) -> NNPadding:
        """
        -inverse
        """
    def label(self) -> str:
        """
        -label
        """
    def padding_method(self) -> int:
        """
        -paddingMethod
        """
class NNDefaultPadding(NNPadding):
    """
    MPSNNDefaultPadding
    """
    @staticmethod
    def padding_for_tensorflow_average_pooling() -> NNDefaultPadding:
        """
        +[MPSNNDefaultPadding paddingForTensorflowAveragePooling]: TF SAME (SIZE_SAME | ALIGN_CENTERED | ADD_REMAINDER_TO_BOTTOM_RIGHT) that also sets the kernel's edge_mode to CLAMP (average pooling over the in-image pixels) in its custom step; the method carries CUSTOM | CUSTOM_WHITELIST_FOR_NODE_FUSION
        """
    @staticmethod
    def padding_for_tensorflow_average_pooling_valid_only() -> NNDefaultPadding:
        """
        +[MPSNNDefaultPadding paddingForTensorflowAveragePoolingValidOnly]
        """
    @staticmethod
    def padding_with_method(method: typing.SupportsInt | typing.SupportsIndex) -> NNDefaultPadding:
        """
        +[MPSNNDefaultPadding paddingWithMethod:]
        """
    def __init__(self, method: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +[MPSNNDefaultPadding paddingWithMethod:]
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
class CNNKernel(Kernel):
    """
    MPSCNNKernel
    """
    def append_batch_barrier(self) -> bool:
        ...
    def destination_image_descriptor(self, source_images: list[Image], source_states: list[State] | None = None) -> ImageDescriptor:
        """
        -destinationImageDescriptorForSourceImages:sourceStates: (runs the padding policy; sets `offset`)
        """
    def encode(self, command_buffer: CommandBuffer, source_image: Image, destination_state: State | None = None, destination_image: Image | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        Encode forms of MPSCNNKernel:
        - destination_image given: -encodeToCommandBuffer:sourceImage:[destinationState:]destinationImage: (uses `offset` as set, ignores `padding`); returns destination_image.
        - otherwise -encodeToCommandBuffer:sourceImage: (padding policy applied, result allocated); with destination_state_is_temporary=True/False it is -encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary: and returns (image, state).
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: list[Image], destination_states: list[State] | None = None, destination_images: list[Image] | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        -encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages: and the returning forms (see encode).
        """
    def is_result_state_reused_across_batch(self) -> bool:
        ...
    def result_state(self, source_image: Image, source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -resultStateForSourceImage:sourceStates:destinationImage:
        """
    def result_state_batch(self, source_images: list[Image], source_states: list[State] | None = None, destination_images: list[Image] | None = None) -> list[State]:
        """
        -resultStateBatchForSourceImage:sourceStates:destinationImage:
        """
    def temporary_result_state(self, command_buffer: CommandBuffer, source_image: Image, source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -temporaryResultStateForCommandBuffer:sourceImage:sourceStates:destinationImage:
        """
    def temporary_result_state_batch(self, command_buffer: CommandBuffer, source_images: list[Image], source_states: list[State] | None = None, destination_images: list[Image] | None = None) -> list[State]:
        """
        -temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:
        """
    @property
    def clip_rect(self) -> Region:
        """
        MPSCNNKernel.clipRect
        """
    @clip_rect.setter
    def clip_rect(self, arg1: Region | tuple[tuple[int, ...], tuple[int, ...]]) -> None:
        ...
    @property
    def destination_feature_channel_offset(self) -> int:
        ...
    @destination_feature_channel_offset.setter
    def destination_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def destination_image_allocator(self) -> ImageAllocator:
        ...
    @destination_image_allocator.setter
    def destination_image_allocator(self, arg1: ImageAllocator | None) -> None:
        ...
    @property
    def dilation_rate_x(self) -> int:
        ...
    @property
    def dilation_rate_y(self) -> int:
        ...
    @property
    def edge_mode(self) -> ImageEdgeMode:
        ...
    @edge_mode.setter
    def edge_mode(self, arg1: typing.Any) -> None:
        ...
    @property
    def is_backwards(self) -> bool:
        ...
    @property
    def is_state_modified(self) -> bool:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def offset(self) -> Offset:
        """
        MPSCNNKernel.offset
        """
    @offset.setter
    def offset(self, arg1: Offset | tuple[int, int] | tuple[int, int, int]) -> None:
        ...
    @property
    def padding(self) -> NNPadding:
        ...
    @padding.setter
    def padding(self, arg1: NNPadding | None) -> None:
        ...
    @property
    def source_feature_channel_max_count(self) -> int:
        ...
    @source_feature_channel_max_count.setter
    def source_feature_channel_max_count(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def source_feature_channel_offset(self) -> int:
        ...
    @source_feature_channel_offset.setter
    def source_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def stride_in_pixels_x(self) -> int:
        ...
    @property
    def stride_in_pixels_y(self) -> int:
        ...
class CNNBinaryKernel(Kernel):
    """
    MPSCNNBinaryKernel
    """
    def append_batch_barrier(self) -> bool:
        ...
    def destination_image_descriptor(self, source_images: list[Image], source_states: list[State] | None = None) -> ImageDescriptor:
        """
        -destinationImageDescriptorForSourceImages:sourceStates:
        """
    def encode(self, command_buffer: CommandBuffer, primary_image: Image, secondary_image: Image, destination_state: State | None = None, destination_image: Image | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        Encode forms of MPSCNNBinaryKernel:
        - destination_image given: -encodeToCommandBuffer:primaryImage:secondaryImage:[destinationState:]destinationImage: (uses primary_offset / secondary_offset as set, ignores `padding`); returns destination_image.
        - otherwise -encodeToCommandBuffer:primaryImage:secondaryImage: (padding policy applied, result allocated); with destination_state_is_temporary=True/False it is -encodeToCommandBuffer:primaryImage:secondaryImage:destinationState:destinationStateIsTemporary: and returns (image, state).
        """
    def encode_batch(self, command_buffer: CommandBuffer, primary_images: list[Image], secondary_images: list[Image], destination_states: list[State] | None = None, destination_images: list[Image] | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        -encodeBatchToCommandBuffer:primaryImages:secondaryImages:[destinationStates:]destinationImages: and the returning forms (see encode).
        """
    def is_result_state_reused_across_batch(self) -> bool:
        ...
    def result_state(self, primary_image: Image, secondary_image: Image, source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage: (None when the kernel writes no state)
        """
    def temporary_result_state(self, command_buffer: CommandBuffer, primary_image: Image, secondary_image: Image, source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -temporaryResultStateForCommandBuffer:primaryImage:secondaryImage:sourceStates:destinationImage:
        """
    @property
    def clip_rect(self) -> Region:
        ...
    @clip_rect.setter
    def clip_rect(self, arg1: Region | tuple[tuple[int, ...], tuple[int, ...]]) -> None:
        ...
    @property
    def destination_feature_channel_offset(self) -> int:
        ...
    @destination_feature_channel_offset.setter
    def destination_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def destination_image_allocator(self) -> ImageAllocator:
        ...
    @destination_image_allocator.setter
    def destination_image_allocator(self, arg1: ImageAllocator | None) -> None:
        ...
    @property
    def is_backwards(self) -> bool:
        ...
    @property
    def is_state_modified(self) -> bool:
        ...
    @property
    def padding(self) -> NNPadding:
        ...
    @padding.setter
    def padding(self, arg1: NNPadding | None) -> None:
        ...
    @property
    def primary_dilation_rate_x(self) -> int:
        ...
    @property
    def primary_dilation_rate_y(self) -> int:
        ...
    @property
    def primary_edge_mode(self) -> ImageEdgeMode:
        ...
    @primary_edge_mode.setter
    def primary_edge_mode(self, arg1: typing.Any) -> None:
        ...
    @property
    def primary_kernel_height(self) -> int:
        ...
    @property
    def primary_kernel_width(self) -> int:
        ...
    @property
    def primary_offset(self) -> Offset:
        ...
    @primary_offset.setter
    def primary_offset(self, arg1: Offset | tuple[int, int] | tuple[int, int, int]) -> None:
        ...
    @property
    def primary_source_feature_channel_max_count(self) -> int:
        ...
    @primary_source_feature_channel_max_count.setter
    def primary_source_feature_channel_max_count(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def primary_source_feature_channel_offset(self) -> int:
        ...
    @primary_source_feature_channel_offset.setter
    def primary_source_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def primary_stride_in_pixels_x(self) -> int:
        ...
    @primary_stride_in_pixels_x.setter
    def primary_stride_in_pixels_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def primary_stride_in_pixels_y(self) -> int:
        ...
    @primary_stride_in_pixels_y.setter
    def primary_stride_in_pixels_y(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def secondary_dilation_rate_x(self) -> int:
        ...
    @property
    def secondary_dilation_rate_y(self) -> int:
        ...
    @property
    def secondary_edge_mode(self) -> ImageEdgeMode:
        ...
    @secondary_edge_mode.setter
    def secondary_edge_mode(self, arg1: typing.Any) -> None:
        ...
    @property
    def secondary_kernel_height(self) -> int:
        ...
    @property
    def secondary_kernel_width(self) -> int:
        ...
    @property
    def secondary_offset(self) -> Offset:
        ...
    @secondary_offset.setter
    def secondary_offset(self, arg1: Offset | tuple[int, int] | tuple[int, int, int]) -> None:
        ...
    @property
    def secondary_source_feature_channel_max_count(self) -> int:
        ...
    @secondary_source_feature_channel_max_count.setter
    def secondary_source_feature_channel_max_count(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def secondary_source_feature_channel_offset(self) -> int:
        ...
    @secondary_source_feature_channel_offset.setter
    def secondary_source_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def secondary_stride_in_pixels_x(self) -> int:
        ...
    @secondary_stride_in_pixels_x.setter
    def secondary_stride_in_pixels_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def secondary_stride_in_pixels_y(self) -> int:
        ...
    @secondary_stride_in_pixels_y.setter
    def secondary_stride_in_pixels_y(self, arg1: typing.SupportsInt) -> None:
        ...
class CNNGradientKernel(CNNBinaryKernel):
    """
    MPSCNNGradientKernel
    """
    def encode(self, command_buffer: CommandBuffer, source_gradient: Image, source_image: Image, gradient_state: State, destination_gradient: Image | None = None) -> Image:
        """
        -encodeToCommandBuffer:sourceGradient:sourceImage:gradientState:[destinationGradient:]. Without a destination the forward parameters are copied from the state and the result is allocated; with one, the kernel's properties are used as set (call destination_image_descriptor first).
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_gradients: list[Image], source_images: list[Image], gradient_states: list[State], destination_gradients: list[Image] | None = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceGradients:sourceImages:gradientStates:[destinationGradients:]
        """
    @property
    def kernel_offset_x(self) -> int:
        """
        MPSCNNGradientKernel.kernelOffsetX
        """
    @kernel_offset_x.setter
    def kernel_offset_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def kernel_offset_y(self) -> int:
        """
        MPSCNNGradientKernel.kernelOffsetY
        """
    @kernel_offset_y.setter
    def kernel_offset_y(self, arg1: typing.SupportsInt) -> None:
        ...
class NNMultiaryGradientState(State):
    """
    MPSNNMultiaryGradientState: what a multiary forward kernel recorded about each of its sources for the gradient kernels; read count as any temporary state (one per gradient kernel that reads it).
    """
    @property
    def source_count(self) -> int:
        ...
class CNNMultiaryKernel(Kernel):
    """
    MPSCNNMultiaryKernel (macOS 10.15): a kernel with source_count sources and per-index properties.
    """
    def append_batch_barrier(self) -> bool:
        ...
    def destination_image_descriptor(self, source_images: list[Image], source_states: list[State] | None = None) -> ImageDescriptor:
        """
        -destinationImageDescriptorForSourceImages:sourceStates: (one image per source index)
        """
    def dilation_rate_x_at_index(self, index: typing.SupportsInt) -> int:
        """
        -dilationRateXAtIndex:
        """
    def dilation_rate_y_at_index(self, index: typing.SupportsInt) -> int:
        """
        -dilationRateYAtIndex:
        """
    def edge_mode_at_index(self, index: typing.SupportsInt) -> ImageEdgeMode:
        """
        -edgeModeAtIndex:
        """
    def encode(self, command_buffer: CommandBuffer, source_images: list[Image], destination_state: State | None = None, destination_image: Image | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        Encode forms of MPSCNNMultiaryKernel (source_images: one Image per source index):
        - destination_image given: -encodeToCommandBuffer:sourceImages:[destinationState:]destinationImage:; returns destination_image.
        - otherwise -encodeToCommandBuffer:sourceImages: (result allocated); with destination_state_is_temporary=True/False it is -encodeToCommandBuffer:sourceImages:destinationState:destinationStateIsTemporary: and returns (image, state).
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: list[list[Image]], destination_states: list[State] | None = None, destination_images: list[Image] | None = None, *, destination_state_is_temporary: bool | None = None) -> typing.Any:
        """
        -encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages: and the returning forms; source_images[i] is the batch (list of Images) of source index i.
        """
    def is_result_state_reused_across_batch(self) -> bool:
        ...
    def kernel_height_at_index(self, index: typing.SupportsInt) -> int:
        """
        -kernelHeightAtIndex:
        """
    def kernel_width_at_index(self, index: typing.SupportsInt) -> int:
        """
        -kernelWidthAtIndex:
        """
    def offset_at_index(self, index: typing.SupportsInt) -> Offset:
        """
        -offsetAtIndex:
        """
    def result_state(self, source_images: list[Image], source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -resultStateForSourceImages:sourceStates:destinationImage:
        """
    def set_dilation_rate_x(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setdilationRateX:atIndex:
        """
    def set_dilation_rate_y(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setdilationRateY:atIndex:
        """
    def set_edge_mode(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setedgeMode:atIndex:
        """
    def set_kernel_height(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setkernelHeight:atIndex:
        """
    def set_kernel_width(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setkernelWidth:atIndex:
        """
    def set_offset(self, offset: Offset | tuple[int, int] | tuple[int, int, int], index: typing.SupportsInt) -> None:
        """
        -setOffset:atIndex:
        """
    def set_source_feature_channel_max_count(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setsourceFeatureChannelMaxCount:atIndex:
        """
    def set_source_feature_channel_offset(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setsourceFeatureChannelOffset:atIndex:
        """
    def set_stride_in_pixels_x(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setstrideInPixelsX:atIndex:
        """
    def set_stride_in_pixels_y(self, value: typing.Any, index: typing.SupportsInt) -> None:
        """
        -setstrideInPixelsY:atIndex:
        """
    def source_feature_channel_max_count_at_index(self, index: typing.SupportsInt) -> int:
        """
        -sourceFeatureChannelMaxCountAtIndex:
        """
    def source_feature_channel_offset_at_index(self, index: typing.SupportsInt) -> int:
        """
        -sourceFeatureChannelOffsetAtIndex:
        """
    def stride_in_pixels_x_at_index(self, index: typing.SupportsInt) -> int:
        """
        -strideInPixelsXAtIndex:
        """
    def stride_in_pixels_y_at_index(self, index: typing.SupportsInt) -> int:
        """
        -strideInPixelsYAtIndex:
        """
    def temporary_result_state(self, command_buffer: CommandBuffer, source_images: list[Image], source_states: list[State] | None = None, destination_image: Image | None = None) -> State:
        """
        -temporaryResultStateForCommandBuffer:sourceImages:sourceStates:destinationImage:
        """
    @property
    def clip_rect(self) -> Region:
        ...
    @clip_rect.setter
    def clip_rect(self, arg1: Region | tuple[tuple[int, ...], tuple[int, ...]]) -> None:
        ...
    @property
    def destination_feature_channel_offset(self) -> int:
        ...
    @destination_feature_channel_offset.setter
    def destination_feature_channel_offset(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def destination_image_allocator(self) -> ImageAllocator:
        ...
    @destination_image_allocator.setter
    def destination_image_allocator(self, arg1: ImageAllocator | None) -> None:
        ...
    @property
    def is_backwards(self) -> bool:
        ...
    @property
    def is_state_modified(self) -> bool:
        ...
    @property
    def padding(self) -> NNPadding:
        ...
    @padding.setter
    def padding(self, arg1: NNPadding | None) -> None:
        ...
    @property
    def source_count(self) -> int:
        ...
class CNNNeuronType:
    """
    MPSCNNNeuronType
    
    Members:
    
      NONE
    
      RELU
    
      LINEAR
    
      SIGMOID
    
      HARD_SIGMOID
    
      TANH
    
      ABSOLUTE
    
      SOFT_PLUS
    
      SOFT_SIGN
    
      ELU
    
      PRELU
    
      RELUN
    
      POWER
    
      EXPONENTIAL
    
      LOGARITHM
    
      GELU
    """
    ABSOLUTE: typing.ClassVar[CNNNeuronType]
    ELU: typing.ClassVar[CNNNeuronType]
    EXPONENTIAL: typing.ClassVar[CNNNeuronType]
    GELU: typing.ClassVar[CNNNeuronType]
    HARD_SIGMOID: typing.ClassVar[CNNNeuronType]
    LINEAR: typing.ClassVar[CNNNeuronType]
    LOGARITHM: typing.ClassVar[CNNNeuronType]
    NONE: typing.ClassVar[CNNNeuronType]
    POWER: typing.ClassVar[CNNNeuronType]
    PRELU: typing.ClassVar[CNNNeuronType]
    RELU: typing.ClassVar[CNNNeuronType]
    RELUN: typing.ClassVar[CNNNeuronType]
    SIGMOID: typing.ClassVar[CNNNeuronType]
    SOFT_PLUS: typing.ClassVar[CNNNeuronType]
    SOFT_SIGN: typing.ClassVar[CNNNeuronType]
    TANH: typing.ClassVar[CNNNeuronType]
    __members__: typing.ClassVar[dict[str, CNNNeuronType]]
    @typing.overload
    def __eq__(self, other: CNNNeuronType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CNNNeuronType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class NNNeuronDescriptor:
    """
    MPSNNNeuronDescriptor
    """
    @staticmethod
    def prelu(data: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> NNNeuronDescriptor:
        """
        +[MPSNNNeuronDescriptor cnnNeuronPReLUDescriptorWithData:noCopy:]
        """
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any) -> typing.Any:
        """
        The object from to_bytes() data. SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, neuron_type: typing.Any, a: typing.Any = None, b: typing.Any = None, c: typing.Any = None) -> None:
        """
        +[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:b:c:]; omitted parameters take the type's documented defaults (docs/neurons.md)
        """
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __repr__(self) -> str:
        ...
    def to_bytes(self) -> bytes:
        """
        The object as bytes (docs/serialization.md).
        """
    @property
    def a(self) -> float:
        ...
    @a.setter
    def a(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def b(self) -> float:
        ...
    @b.setter
    def b(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def c(self) -> float:
        ...
    @c.setter
    def c(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def data(self) -> list[float]:
        ...
    @data.setter
    def data(self, arg1: typing.Any) -> None:
        ...
    @property
    def neuron_type(self) -> CNNNeuronType:
        ...
    @neuron_type.setter
    def neuron_type(self, arg1: typing.Any) -> None:
        ...
class CNNNeuronGradientState(NNGradientState):
    """
    The MPSNNGradientState a CNNNeuron writes for CNNNeuronGradient (forward geometry, neuron type, and which images were the forward input and output)
    """
    @property
    def gradient_for_data(self) -> typing.Any:
        """
        mpsgrad extension (MPS has none): PReLU's dL/da, one value per PReLU data value, written by CNNNeuronGradient: the sum over the pixels of this state's forward image of G * min(X, 0) (0 for channels the forward pass did not process). None for the other neuron types.
        """
    @property
    def neuron_type(self) -> CNNNeuronType:
        ...
class CNNNeuron(CNNKernel):
    """
    MPSCNNNeuron: Y = f(X) per pixel and feature channel, f given by the NNNeuronDescriptor (formulas in docs/neurons.md). result_state() returns a CNNNeuronGradientState for CNNNeuronGradient.
    """
    def __init__(self, device: Device | str, neuron_descriptor: typing.Any) -> None:
        """
        -[MPSCNNNeuron initWithDevice:neuronDescriptor:]. ValueError for a neuron type out of range or a PReLU descriptor without data; PReLU data must hold one value per processed channel (or per channel of the source image), checked at encode.
        """
    @property
    def a(self) -> float:
        """
        MPSCNNNeuron.a
        """
    @property
    def b(self) -> float:
        """
        MPSCNNNeuron.b
        """
    @property
    def c(self) -> float:
        """
        MPSCNNNeuron.c
        """
    @property
    def data(self) -> list[float]:
        """
        MPSCNNNeuron.data (PReLU's per-channel a; empty otherwise)
        """
    @property
    def neuron_descriptor(self) -> NNNeuronDescriptor:
        ...
    @property
    def neuron_type(self) -> CNNNeuronType:
        """
        MPSCNNNeuron.neuronType
        """
class CNNNeuronAbsolute(CNNNeuron):
    """
    MPSCNNNeuronAbsolute: the Absolute neuron, f(x) = |x|. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNNeuronAbsolute initWithDevice:]
        """
class CNNNeuronSigmoid(CNNNeuron):
    """
    MPSCNNNeuronSigmoid: the Sigmoid neuron, f(x) = 1 / (1 + exp(-x)). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNNeuronSigmoid initWithDevice:]
        """
class CNNNeuronSoftSign(CNNNeuron):
    """
    MPSCNNNeuronSoftSign: the SoftSign neuron, f(x) = x / (1 + |x|). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNNeuronSoftSign initWithDevice:]
        """
class CNNNeuronReLU(CNNNeuron):
    """
    MPSCNNNeuronReLU: the ReLU neuron, f(x) = x >= 0 ? x : a*x. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        """
        -[MPSCNNNeuronReLU initWithDevice:a:] (a = 0: plain ReLU; otherwise leaky ReLU)
        """
class CNNNeuronELU(CNNNeuron):
    """
    MPSCNNNeuronELU: the ELU neuron, f(x) = x >= 0 ? x : a*(exp(x) - 1). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> None:
        """
        -[MPSCNNNeuronELU initWithDevice:a:]
        """
class CNNNeuronPReLU(CNNNeuron):
    """
    MPSCNNNeuronPReLU: the PReLU neuron, f(x) = x >= 0 ? x : a[channel]*x. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        """
        -[MPSCNNNeuronPReLU initWithDevice:a:count:]: `a` holds one value per processed feature channel (or one per channel of the source image); count is len(a)
        """
class CNNNeuronLinear(CNNNeuron):
    """
    MPSCNNNeuronLinear: the Linear neuron, f(x) = a*x + b. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        """
        -[MPSCNNNeuronLinear initWithDevice:a:b:] (defaults: docs/neurons.md)
        """
class CNNNeuronHardSigmoid(CNNNeuron):
    """
    MPSCNNNeuronHardSigmoid: the HardSigmoid neuron, f(x) = clamp(a*x + b, 0, 1). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 0.20000000298023224, b: typing.SupportsFloat | typing.SupportsIndex = 0.5) -> None:
        """
        -[MPSCNNNeuronHardSigmoid initWithDevice:a:b:] (defaults: docs/neurons.md)
        """
class CNNNeuronTanH(CNNNeuron):
    """
    MPSCNNNeuronTanH: the TanH neuron, f(x) = a*tanh(b*x). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> None:
        """
        -[MPSCNNNeuronTanH initWithDevice:a:b:] (defaults: docs/neurons.md)
        """
class CNNNeuronSoftPlus(CNNNeuron):
    """
    MPSCNNNeuronSoftPlus: the SoftPlus neuron, f(x) = a*log(1 + exp(b*x)). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> None:
        """
        -[MPSCNNNeuronSoftPlus initWithDevice:a:b:] (defaults: docs/neurons.md)
        """
class CNNNeuronReLUN(CNNNeuron):
    """
    MPSCNNNeuronReLUN: the ReLUN neuron, f(x) = min(x >= 0 ? x : a*x, b). A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 6.0) -> None:
        """
        -[MPSCNNNeuronReLUN initWithDevice:a:b:] (defaults: docs/neurons.md)
        """
class CNNNeuronPower(CNNNeuron):
    """
    MPSCNNNeuronPower: the Power neuron, f(x) = (a*x + b)^c. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> None:
        """
        -[MPSCNNNeuronPower initWithDevice:a:b:c:] (defaults: docs/neurons.md)
        """
class CNNNeuronExponential(CNNNeuron):
    """
    MPSCNNNeuronExponential: the Exponential neuron, f(x) = c^(a*x + b), c = -1 meaning base e. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = -1.0) -> None:
        """
        -[MPSCNNNeuronExponential initWithDevice:a:b:c:] (defaults: docs/neurons.md)
        """
class CNNNeuronLogarithm(CNNNeuron):
    """
    MPSCNNNeuronLogarithm: the Logarithm neuron, f(x) = log_c(a*x + b), c = -1 meaning the natural log. A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.
    """
    def __init__(self, device: Device | str, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = -1.0) -> None:
        """
        -[MPSCNNNeuronLogarithm initWithDevice:a:b:c:] (defaults: docs/neurons.md)
        """
class CNNNeuronGradient(CNNGradientKernel):
    """
    MPSCNNNeuronGradient: dX = G * f'(X). source_gradient = G (dL/dY), source_image = the forward INPUT X, gradient_state = the CNNNeuron's result state. At the kinks (ReLU, PReLU, ELU, ReLUN at x = 0) the derivative of the x >= 0 branch is used, as MPS documents.
    """
    def __init__(self, device: Device | str, neuron_descriptor: typing.Any) -> None:
        """
        -[MPSCNNNeuronGradient initWithDevice:neuronDescriptor:] (the forward neuron's descriptor)
        """
    @property
    def a(self) -> float:
        """
        MPSCNNNeuronGradient.a
        """
    @property
    def b(self) -> float:
        """
        MPSCNNNeuronGradient.b
        """
    @property
    def c(self) -> float:
        """
        MPSCNNNeuronGradient.c
        """
    @property
    def data(self) -> list[float]:
        """
        MPSCNNNeuronGradient.data
        """
    @property
    def neuron_descriptor(self) -> NNNeuronDescriptor:
        ...
    @property
    def neuron_type(self) -> CNNNeuronType:
        """
        MPSCNNNeuronGradient.neuronType
        """
class CNNConvolutionGradientOption:
    """
    MPSCNNConvolutionGradientOption
    
    Members:
    
      GRADIENT_WITH_DATA
    
      GRADIENT_WITH_WEIGHTS_AND_BIAS
    
      ALL
    """
    ALL: typing.ClassVar[CNNConvolutionGradientOption]
    GRADIENT_WITH_DATA: typing.ClassVar[CNNConvolutionGradientOption]
    GRADIENT_WITH_WEIGHTS_AND_BIAS: typing.ClassVar[CNNConvolutionGradientOption]
    __members__: typing.ClassVar[dict[str, CNNConvolutionGradientOption]]
    @typing.overload
    def __eq__(self, other: CNNConvolutionGradientOption) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CNNConvolutionGradientOption) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class NNConvolutionAccumulatorPrecisionOption:
    """
    MPSNNConvolutionAccumulatorPrecisionOption
    
    Members:
    
      HALF
    
      FLOAT
    """
    FLOAT: typing.ClassVar[NNConvolutionAccumulatorPrecisionOption]
    HALF: typing.ClassVar[NNConvolutionAccumulatorPrecisionOption]
    __members__: typing.ClassVar[dict[str, NNConvolutionAccumulatorPrecisionOption]]
    @typing.overload
    def __eq__(self, other: NNConvolutionAccumulatorPrecisionOption) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: NNConvolutionAccumulatorPrecisionOption) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNConvolutionDescriptor:
    """
    MPSCNNConvolutionDescriptor
    """
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any) -> typing.Any:
        """
        The object from to_bytes() data. SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, kernel_width: typing.SupportsInt = 3, kernel_height: typing.SupportsInt = 3, input_feature_channels: typing.SupportsInt = 0, output_feature_channels: typing.SupportsInt = 0, neuron: typing.Any = None) -> None:
        """
        +[MPSCNNConvolutionDescriptor cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:]
        """
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __repr__(self) -> str:
        ...
    def set_batch_normalization_parameters_for_inference(self, mean: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], variance: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], gamma: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], beta: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], epsilon: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        -setBatchNormalizationParametersForInferenceWithMean:variance:gamma:beta:epsilon:
        """
    def to_bytes(self) -> bytes:
        """
        The object as bytes (docs/serialization.md).
        """
    def validate(self) -> None:
        """
        Raises ValueError naming a bad property.
        """
    @property
    def channel_multiplier(self) -> int:
        ...
    @property
    def dilation_rate_x(self) -> int:
        ...
    @dilation_rate_x.setter
    def dilation_rate_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def dilation_rate_y(self) -> int:
        ...
    @dilation_rate_y.setter
    def dilation_rate_y(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def fused_neuron_descriptor(self) -> typing.Any:
        """
        MPSCNNConvolutionDescriptor.fusedNeuronDescriptor (None: no neuron)
        """
    @fused_neuron_descriptor.setter
    def fused_neuron_descriptor(self, arg1: typing.Any) -> None:
        ...
    @property
    def groups(self) -> int:
        ...
    @groups.setter
    def groups(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def input_feature_channels(self) -> int:
        ...
    @input_feature_channels.setter
    def input_feature_channels(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def is_depthwise(self) -> bool:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @kernel_height.setter
    def kernel_height(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @kernel_width.setter
    def kernel_width(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def output_feature_channels(self) -> int:
        ...
    @output_feature_channels.setter
    def output_feature_channels(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def stride_in_pixels_x(self) -> int:
        ...
    @stride_in_pixels_x.setter
    def stride_in_pixels_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def stride_in_pixels_y(self) -> int:
        ...
    @stride_in_pixels_y.setter
    def stride_in_pixels_y(self, arg1: typing.SupportsInt) -> None:
        ...
class CNNSubPixelConvolutionDescriptor(CNNConvolutionDescriptor):
    """
    MPSCNNSubPixelConvolutionDescriptor: a convolution that computes output_feature_channels channels, then shuffles them into sub_pixel_scale_factor x sub_pixel_scale_factor pixel blocks of output_feature_channels / sub_pixel_scale_factor**2 channels (docs/convolution_sub_pixel.md)
    """
    def __init__(self, kernel_width: typing.SupportsInt = 3, kernel_height: typing.SupportsInt = 3, input_feature_channels: typing.SupportsInt = 0, output_feature_channels: typing.SupportsInt = 0, sub_pixel_scale_factor: typing.SupportsInt = 1, neuron: typing.Any = None) -> None:
        """
        +[MPSCNNSubPixelConvolutionDescriptor cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:], then subPixelScaleFactor
        """
    @property
    def sub_pixel_scale_factor(self) -> int:
        """
        MPSCNNSubPixelConvolutionDescriptor.subPixelScaleFactor [1]
        """
    @sub_pixel_scale_factor.setter
    def sub_pixel_scale_factor(self, arg1: typing.SupportsInt) -> None:
        ...
class CNNConvolutionDataSource:
    """
    @protocol MPSCNNConvolutionDataSource. Any Python object with descriptor(), weights(), bias_terms(), load(), purge() (and optionally data_type(), label()) can be passed where a data source is expected.
    """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
class CNNConvolutionWeightsDataSource(CNNConvolutionDataSource):
    """
    A ready-made data source holding weights (O, kH, kW, I/groups) and biases (O,) in memory. `weights` and `biases` are writable NumPy views: update them, then call reload_weights_and_biases_from_data_source().
    """
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any) -> typing.Any:
        """
        The object from to_bytes() data. SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, descriptor: CNNConvolutionDescriptor, weights: typing.Any, biases: typing.Any = None, label: str = '') -> None:
        ...
    def __reduce__(self) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        """
        Pickle support (every protocol).
        """
    def data_type(self) -> DataType:
        """
        -dataType
        """
    def descriptor(self) -> typing.Any:
        """
        -descriptor
        """
    def label(self) -> str:
        """
        -label
        """
    def load(self) -> bool:
        """
        -load
        """
    def purge(self) -> None:
        """
        -purge
        """
    def to_bytes(self) -> bytes:
        """
        The object as bytes (docs/serialization.md).
        """
    @property
    def biases(self) -> typing.Any:
        """
        The biases (O,), a writable view, or None
        """
    @property
    def weights(self) -> numpy.ndarray:
        """
        The weights (O, kH, kW, I/groups), a writable view
        """
class CNNConvolutionWeightsAndBiasesState(State):
    """
    MPSCNNConvolutionWeightsAndBiasesState
    """
    @staticmethod
    def temporary(command_buffer: CommandBuffer, descriptor: CNNConvolutionDescriptor) -> CNNConvolutionWeightsAndBiasesState:
        """
        +temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor: (zero weights and biases; read count 1, valid on `command_buffer` only)
        """
    @staticmethod
    def temporary_cnn_convolution_weights_and_biases_state(command_buffer: CommandBuffer, cnn_convolution_descriptor: CNNConvolutionDescriptor) -> CNNConvolutionWeightsAndBiasesState:
        """
        +temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor: under its full name (the same as temporary)
        """
    @typing.overload
    def __init__(self, device: Device | str, descriptor: CNNConvolutionDescriptor) -> None:
        """
        -initWithDevice:cnnConvolutionDescriptor:
        """
    @typing.overload
    def __init__(self, *, weights: Vector | numpy.typing.NDArray[numpy.float32], biases: Vector | numpy.typing.NDArray[numpy.float32] | None = None, descriptor: CNNConvolutionDescriptor | None = None, weights_offset: typing.SupportsInt | typing.SupportsIndex = 0, biases_offset: typing.SupportsInt | typing.SupportsIndex = 0, device: Device | str | None = None) -> None:
        """
        -initWithWeights:biases: / -initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor:: a state over existing memory, no copy (an update through the state is seen in `weights` / `biases`, and a write to them in the state). Each is a Vector (offset in bytes from its first element) or a writable C-contiguous float32 NumPy array (cpu device only). `descriptor` may be left out for a 4-D (O, kH, kW, I) weights array; biases None gives zero biases of the state's own.
        """
    @property
    def biases(self) -> numpy.ndarray:
        """
        MPSCNNConvolutionWeightsAndBiasesState.biases as a writable (O,) view
        """
    @property
    def biases_offset(self) -> int:
        """
        MPSCNNConvolutionWeightsAndBiasesState.biasesOffset: bytes into the biases' buffer
        """
    @property
    def biases_vector(self) -> Vector:
        """
        A Vector aliasing the biases
        """
    @property
    def weights(self) -> numpy.ndarray:
        """
        MPSCNNConvolutionWeightsAndBiasesState.weights as a writable (O, kH, kW, I/groups) view
        """
    @property
    def weights_offset(self) -> int:
        """
        MPSCNNConvolutionWeightsAndBiasesState.weightsOffset: bytes into the weights' buffer
        """
    @property
    def weights_vector(self) -> Vector:
        """
        [[MPSVector alloc] initWithBuffer:state.weights offset:state.weightsOffset descriptor:...]: a Vector aliasing the weights (for an optimizer's vector encode)
        """
class CNNConvolution(CNNKernel):
    """
    MPSCNNConvolution
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNConvolution initWithDevice:weights:]
        """
    def export_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, result_state_can_be_temporary: bool = False) -> CNNConvolutionWeightsAndBiasesState:
        """
        -exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:
        """
    def reload_weights_and_biases_from_data_source(self) -> None:
        """
        -reloadWeightsAndBiasesFromDataSource
        """
    def reload_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState) -> None:
        """
        -reloadWeightsAndBiasesWithCommandBuffer:state: (decrements a temporary state's read count)
        """
    @property
    def accumulator_precision_option(self) -> NNConvolutionAccumulatorPrecisionOption:
        ...
    @accumulator_precision_option.setter
    def accumulator_precision_option(self, arg1: typing.Any) -> None:
        ...
    @property
    def channel_multiplier(self) -> int:
        ...
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def fused_neuron_descriptor(self) -> typing.Any:
        ...
    @property
    def groups(self) -> int:
        ...
    @property
    def input_feature_channels(self) -> int:
        ...
    @property
    def output_feature_channels(self) -> int:
        ...
    @property
    def sub_pixel_scale_factor(self) -> int:
        ...
class CNNConvolutionGradientState(NNGradientState):
    """
    MPSCNNConvolutionGradientState
    """
    @property
    def gradient_for_weights_vector(self) -> Vector:
        """
        [[MPSVector alloc] initWithBuffer:state.gradientForWeights descriptor:...]: a Vector aliasing the weight gradients (for an optimizer's vector encode)
        """
    @property
    def gradient_for_biases_vector(self) -> Vector:
        """
        A Vector aliasing the bias gradients
        """
    @property
    def convolution(self) -> CNNConvolution:
        """
        MPSCNNConvolutionGradientState.convolution
        """
    @property
    def gradient_for_biases(self) -> numpy.ndarray:
        """
        MPSCNNConvolutionGradientState.gradientForBiases: (O,), summed over the batch
        """
    @property
    def gradient_for_weights(self) -> numpy.ndarray:
        """
        MPSCNNConvolutionGradientState.gradientForWeights: (O, kH, kW, I/groups), summed over the batch
        """
    @property
    def gradient_for_weights_layout(self) -> int:
        ...
    @property
    def source_height(self) -> int:
        ...
    @property
    def source_width(self) -> int:
        ...
class CNNConvolutionGradient(CNNGradientKernel):
    """
    MPSCNNConvolutionGradient
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNConvolutionGradient initWithDevice:weights:] (pass the forward convolution's data source)
        """
    def reload_weights_and_biases_from_data_source(self) -> None:
        """
        -reloadWeightsAndBiasesFromDataSource
        """
    def reload_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState) -> None:
        """
        -reloadWeightsAndBiasesWithCommandBuffer:state:
        """
    @property
    def channel_multiplier(self) -> int:
        ...
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def gradient_option(self) -> CNNConvolutionGradientOption:
        """
        MPSCNNConvolutionGradient.gradientOption
        """
    @gradient_option.setter
    def gradient_option(self, arg1: typing.Any) -> None:
        ...
    @property
    def groups(self) -> int:
        ...
    @property
    def source_gradient_feature_channels(self) -> int:
        ...
    @property
    def source_image_feature_channels(self) -> int:
        ...
class CNNFullyConnected(CNNConvolution):
    """
    MPSCNNFullyConnected: a convolution whose kernel (kernel_width x kernel_height) covers the whole source; the result is 1x1 x output_feature_channels. Weights (O, srcH, srcW, I) (OHWI).
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNFullyConnected initWithDevice:weights:]
        """
class CNNFullyConnectedGradient(CNNConvolutionGradient):
    """
    MPSCNNFullyConnectedGradient
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNFullyConnectedGradient initWithDevice:weights:] (pass the forward layer's data source)
        """
class CNNConvolutionTransposeGradientState(CNNConvolutionGradientState):
    """
    MPSCNNConvolutionTransposeGradientState: `convolution` is the upstream convolution whose gradient state sized the result (or None)
    """
    @property
    def convolution_transpose(self) -> CNNConvolutionTranspose:
        """
        MPSCNNConvolutionTransposeGradientState.convolutionTranspose
        """
class CNNConvolutionTranspose(CNNKernel):
    """
    MPSCNNConvolutionTranspose: zero-insert the source (stride - 1 zeros between pixels), then a stride-1 correlation with the OHWI weights used as given (not rotated)
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNConvolutionTranspose initWithDevice:weights:]
        """
    def encode(self, command_buffer: CommandBuffer, source_image: typing.Any, destination_state: typing.Any = None, destination_image: typing.Any = None, *, convolution_gradient_state: typing.Any = None, destination_state_is_temporary: typing.Any = None) -> typing.Any:
        """
        The CNNKernel encode forms, and with convolution_gradient_state -encodeToCommandBuffer:sourceImage:convolutionGradientState:[destinationState:destinationStateIsTemporary:] (result sized to that convolution's source; returns the image, or (image, state) with destination_state_is_temporary)
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, destination_states: typing.Any = None, destination_images: typing.Any = None, *, convolution_gradient_states: typing.Any = None, destination_state_is_temporary: typing.Any = None) -> typing.Any:
        """
        The CNNKernel batch encode forms, and with convolution_gradient_states -encodeBatchToCommandBuffer:sourceImages:convolutionGradientStates:[destinationStates:destinationStateIsTemporary:]
        """
    def export_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, result_state_can_be_temporary: bool = False) -> CNNConvolutionWeightsAndBiasesState:
        """
        -exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:
        """
    def reload_weights_and_biases_from_data_source(self) -> None:
        """
        -reloadWeightsAndBiasesFromDataSource
        """
    def reload_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState) -> None:
        """
        -reloadWeightsAndBiasesWithCommandBuffer:state:
        """
    @property
    def accumulator_precision_option(self) -> NNConvolutionAccumulatorPrecisionOption:
        ...
    @accumulator_precision_option.setter
    def accumulator_precision_option(self, arg1: typing.Any) -> None:
        ...
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def groups(self) -> int:
        ...
    @property
    def input_feature_channels(self) -> int:
        ...
    @property
    def kernel_offset_x(self) -> int:
        ...
    @kernel_offset_x.setter
    def kernel_offset_x(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def kernel_offset_y(self) -> int:
        ...
    @kernel_offset_y.setter
    def kernel_offset_y(self, arg1: typing.SupportsInt) -> None:
        ...
    @property
    def output_feature_channels(self) -> int:
        ...
class CNNConvolutionTransposeGradient(CNNGradientKernel):
    """
    MPSCNNConvolutionTransposeGradient
    """
    def __init__(self, device: Device | str, weights: typing.Any) -> None:
        """
        -[MPSCNNConvolutionTransposeGradient initWithDevice:weights:] (pass the forward kernel's data source)
        """
    def reload_weights_and_biases_from_data_source(self) -> None:
        """
        -reloadWeightsAndBiasesFromDataSource
        """
    def reload_weights_and_biases_with_command_buffer(self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState) -> None:
        """
        -reloadWeightsAndBiasesWithCommandBuffer:state:
        """
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def gradient_option(self) -> CNNConvolutionGradientOption:
        """
        MPSCNNConvolutionTransposeGradient.gradientOption
        """
    @gradient_option.setter
    def gradient_option(self, arg1: typing.Any) -> None:
        ...
    @property
    def groups(self) -> int:
        ...
    @property
    def source_gradient_feature_channels(self) -> int:
        ...
    @property
    def source_image_feature_channels(self) -> int:
        ...
class NNComparisonType:
    """
    MPSNNComparisonType
    
    Members:
    
      EQUAL
    
      NOT_EQUAL
    
      LESS
    
      LESS_OR_EQUAL
    
      GREATER
    
      GREATER_OR_EQUAL
    """
    EQUAL: typing.ClassVar[NNComparisonType]
    GREATER: typing.ClassVar[NNComparisonType]
    GREATER_OR_EQUAL: typing.ClassVar[NNComparisonType]
    LESS: typing.ClassVar[NNComparisonType]
    LESS_OR_EQUAL: typing.ClassVar[NNComparisonType]
    NOT_EQUAL: typing.ClassVar[NNComparisonType]
    __members__: typing.ClassVar[dict[str, NNComparisonType]]
    @typing.overload
    def __eq__(self, other: NNComparisonType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: NNComparisonType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNArithmeticGradientState(NNBinaryGradientState):
    """
    MPSCNNArithmeticGradientState: the forward arithmetic kernel's parameters, its operands' broadcast parameters, the clamp mask (when a clamp is set) and, for CNNDivide, a copy of y.
    """
    @property
    def has_clamp_mask(self) -> bool:
        ...
    @property
    def maximum_value(self) -> float:
        ...
    @property
    def minimum_value(self) -> float:
        ...
    @property
    def primary_scale(self) -> float:
        ...
    @property
    def secondary_scale(self) -> float:
        ...
class CNNArithmetic(CNNBinaryKernel):
    """
    MPSCNNArithmetic (abstract). r = clamp((primary_scale * x) OP (secondary_scale * y) + bias, minimum_value, maximum_value) with x = primary, y = secondary. Broadcasting: primary/secondary_stride_in_pixels_x/y and primary/secondary_stride_in_feature_channels are 0 or 1; 0 repeats one column / row / channel of that input (all pixel strides 0: a scalar). Training: encode(..., destination_state=result_state(...)) or destination_state_is_temporary=... writes a CNNArithmeticGradientState (clamp mask, forward parameters) for the gradient filters.
    """
    @property
    def bias(self) -> float:
        """
        MPSCNNArithmetic.bias [0]
        """
    @bias.setter
    def bias(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def maximum_value(self) -> float:
        """
        MPSCNNArithmetic.maximumValue [FLT_MAX]
        """
    @maximum_value.setter
    def maximum_value(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def minimum_value(self) -> float:
        """
        MPSCNNArithmetic.minimumValue [-FLT_MAX]
        """
    @minimum_value.setter
    def minimum_value(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def primary_scale(self) -> float:
        """
        MPSCNNArithmetic.primaryScale [1]
        """
    @primary_scale.setter
    def primary_scale(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def primary_stride_in_feature_channels(self) -> int:
        """
        MPSCNNArithmetic.primaryStrideInFeatureChannels [1]: 0 broadcasts channel 0 of the primary's slice
        """
    @primary_stride_in_feature_channels.setter
    def primary_stride_in_feature_channels(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def secondary_scale(self) -> float:
        """
        MPSCNNArithmetic.secondaryScale [1]
        """
    @secondary_scale.setter
    def secondary_scale(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def secondary_stride_in_feature_channels(self) -> int:
        """
        MPSCNNArithmetic.secondaryStrideInFeatureChannels [1]: 0 broadcasts channel 0 of the secondary's slice
        """
    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class CNNAdd(CNNArithmetic):
    """
    MPSCNNAdd: OP = +
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNAdd initWithDevice:]
        """
class CNNSubtract(CNNArithmetic):
    """
    MPSCNNSubtract: OP = -
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNSubtract initWithDevice:]
        """
class CNNMultiply(CNNArithmetic):
    """
    MPSCNNMultiply: OP = *
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNMultiply initWithDevice:]
        """
class CNNDivide(CNNArithmetic):
    """
    MPSCNNDivide: OP = / (IEEE division; x/0 gives ±inf or NaN)
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNDivide initWithDevice:]
        """
class NNCompare(CNNArithmetic):
    """
    MPSNNCompare: r = clamp((compare(primary_scale*x, secondary_scale*y) ? 1 : 0) + bias, minimum_value, maximum_value); forward only (no gradient, no state). threshold is used by EQUAL / NOT_EQUAL only: |x - y| <= threshold.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSNNCompare initWithDevice:]
        """
    @property
    def comparison_type(self) -> NNComparisonType:
        """
        MPSNNCompare.comparisonType [EQUAL]
        """
    @comparison_type.setter
    def comparison_type(self, arg1: typing.Any) -> None:
        ...
    @property
    def threshold(self) -> float:
        """
        MPSNNCompare.threshold [0]
        """
    @threshold.setter
    def threshold(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNArithmeticGradient(CNNGradientKernel):
    """
    MPSCNNArithmeticGradient (abstract): the gradient of a forward arithmetic kernel with respect to one input (is_secondary_source_filter). source_gradient = G, source_image = the OTHER forward operand (y for the primary filter, x for the secondary filter; read by multiply and divide only), gradient_state = the forward CNNArithmeticGradientState. Exact chain rule through the scales (mpsgrad): the scales, strides and clamp bounds describe the forward op and the returning encode forms copy them from the state; broadcast axes are summed so the result has its input's shape; the clamp is differentiated through the mask in the state.
    """
    @property
    def bias(self) -> float:
        """
        MPSCNNArithmeticGradient.bias (ignored, as in MPS)
        """
    @bias.setter
    def bias(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def is_secondary_source_filter(self) -> bool:
        """
        MPSCNNArithmeticGradient.isSecondarySourceFilter
        """
    @property
    def maximum_value(self) -> float:
        """
        MPSCNNArithmeticGradient.maximumValue (informational: the state's clamp mask is applied)
        """
    @maximum_value.setter
    def maximum_value(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def minimum_value(self) -> float:
        """
        MPSCNNArithmeticGradient.minimumValue (informational: the state's clamp mask is applied)
        """
    @minimum_value.setter
    def minimum_value(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def primary_scale(self) -> float:
        """
        MPSCNNArithmeticGradient.primaryScale (the forward pS)
        """
    @primary_scale.setter
    def primary_scale(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def primary_stride_in_feature_channels(self) -> int:
        """
        The forward primary's feature-channel stride (must equal the forward kernel's)
        """
    @primary_stride_in_feature_channels.setter
    def primary_stride_in_feature_channels(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def secondary_scale(self) -> float:
        """
        MPSCNNArithmeticGradient.secondaryScale (the forward sS)
        """
    @secondary_scale.setter
    def secondary_scale(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def secondary_stride_in_feature_channels(self) -> int:
        """
        MPSCNNArithmeticGradient.secondaryStrideInFeatureChannels (must equal the forward kernel's)
        """
    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class CNNAddGradient(CNNArithmeticGradient):
    """
    MPSCNNAddGradient: primary dX = primary_scale*G, secondary dY = secondary_scale*G
    """
    def __init__(self, device: Device | str, is_secondary_source_filter: bool) -> None:
        """
        -[MPSCNNAddGradient initWithDevice:isSecondarySourceFilter:]
        """
class CNNSubtractGradient(CNNArithmeticGradient):
    """
    MPSCNNSubtractGradient: primary dX = primary_scale*G, secondary dY = -secondary_scale*G (MPS code that sets primary_scale = -1 on the secondary filter still gets -G)
    """
    def __init__(self, device: Device | str, is_secondary_source_filter: bool) -> None:
        """
        -[MPSCNNSubtractGradient initWithDevice:isSecondarySourceFilter:]
        """
class CNNMultiplyGradient(CNNArithmeticGradient):
    """
    MPSCNNMultiplyGradient: primary dX = pS*sS*y*G (source_image = y), secondary dY = pS*sS*x*G (source_image = x)
    """
    def __init__(self, device: Device | str, is_secondary_source_filter: bool) -> None:
        """
        -[MPSCNNMultiplyGradient initWithDevice:isSecondarySourceFilter:]
        """
class CNNDivideGradient(CNNArithmeticGradient):
    """
    mpsgrad extension (MPS has no divide gradient): primary dX = G*pS/(sS*y) (source_image = y), secondary dY = -G*pS*x/(sS*y^2) (source_image = x; y is the copy CNNDivide stored in the state)
    """
    def __init__(self, device: Device | str, is_secondary_source_filter: bool) -> None:
        """
        CNNDivideGradient(device, is_secondary_source_filter), shaped like the MPS arithmetic gradient inits
        """
class CNNSoftMaxGradientState(NNGradientState):
    """
    The MPSNNGradientState CNNSoftMax / CNNLogSoftMax write for their gradients (forward geometry, and which images were the forward input and output)
    """
    @property
    def is_log_softmax(self) -> bool:
        ...
class CNNSoftMax(CNNKernel):
    """
    MPSCNNSoftMax: Y_k = exp(X_k - M) / sum_j exp(X_j - M) across the feature channels of every pixel (M = max_j X_j, so any magnitude is safe).
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNSoftMax initWithDevice:]
        """
class CNNLogSoftMax(CNNKernel):
    """
    MPSCNNLogSoftMax: Y_k = (X_k - M) - log(sum_j exp(X_j - M)) across the feature channels of every pixel.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNLogSoftMax initWithDevice:]
        """
class CNNSoftMaxGradient(CNNGradientKernel):
    """
    MPSCNNSoftMaxGradient: dX_k = Y_k * (G_k - sum_j G_j Y_j). source_image is the forward OUTPUT Y (not X); gradient_state is CNNSoftMax's result state.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNSoftMaxGradient initWithDevice:]
        """
class CNNLogSoftMaxGradient(CNNGradientKernel):
    """
    MPSCNNLogSoftMaxGradient: dX_k = G_k - exp(Y_k) * sum_j G_j. source_image is the forward OUTPUT Y (log-probabilities); gradient_state is CNNLogSoftMax's result state.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSCNNLogSoftMaxGradient initWithDevice:]
        """
class CNNNormalizationGammaAndBetaState(State):
    """
    MPSCNNNormalizationGammaAndBetaState: gamma and beta buffers
    """
    @staticmethod
    def temporary(command_buffer: CommandBuffer, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex) -> CNNNormalizationGammaAndBetaState:
        """
        +temporaryStateWithCommandBuffer:numberOfFeatureChannels:
        """
    @typing.overload
    def __init__(self, device: Device | str | None, gamma: Vector | numpy.typing.ArrayLike, beta: Vector | numpy.typing.ArrayLike, *, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex | None = None, gamma_offset: typing.SupportsInt | typing.SupportsIndex = 0, beta_offset: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        -initWithGamma:beta: over existing memory when both values are Vectors: the state aliases them (offsets in bytes from each Vector's first element; number_of_feature_channels None: what the first holds after its offset), so a reload reads what an optimizer last wrote there. Array-likes are copied into new buffers on `device`.
        """
    @typing.overload
    def __init__(self, *, gamma: Vector | numpy.typing.ArrayLike, beta: Vector | numpy.typing.ArrayLike, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex | None = None, gamma_offset: typing.SupportsInt | typing.SupportsIndex = 0, beta_offset: typing.SupportsInt | typing.SupportsIndex = 0, device: Device | str | None = None) -> None:
        """
        -initWithGamma:beta: with keywords only (device None: the Vectors', or the default device for arrays)
        """
    @property
    def beta(self) -> typing.Any:
        """
        -beta as a writable (C,) view
        """
    @property
    def beta_vector(self) -> Vector:
        """
        A Vector aliasing -beta
        """
    @property
    def gamma(self) -> typing.Any:
        """
        -gamma as a writable (C,) view
        """
    @property
    def gamma_vector(self) -> Vector:
        """
        A Vector aliasing -gamma (MPSVector initWithBuffer:state.gamma ...)
        """
    @property
    def number_of_feature_channels(self) -> int:
        ...
class CNNNormalizationMeanAndVarianceState(State):
    """
    MPSCNNNormalizationMeanAndVarianceState: mean and variance buffers
    """
    @staticmethod
    def temporary(command_buffer: CommandBuffer, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex) -> CNNNormalizationMeanAndVarianceState:
        """
        +temporaryStateWithCommandBuffer:numberOfFeatureChannels:
        """
    @typing.overload
    def __init__(self, device: Device | str | None, mean: Vector | numpy.typing.ArrayLike, variance: Vector | numpy.typing.ArrayLike, *, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex | None = None, mean_offset: typing.SupportsInt | typing.SupportsIndex = 0, variance_offset: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        -initWithMean:variance: over existing memory when both values are Vectors: the state aliases them (offsets in bytes from each Vector's first element; number_of_feature_channels None: what the first holds after its offset), so a reload reads what an optimizer last wrote there. Array-likes are copied into new buffers on `device`.
        """
    @typing.overload
    def __init__(self, *, mean: Vector | numpy.typing.ArrayLike, variance: Vector | numpy.typing.ArrayLike, number_of_feature_channels: typing.SupportsInt | typing.SupportsIndex | None = None, mean_offset: typing.SupportsInt | typing.SupportsIndex = 0, variance_offset: typing.SupportsInt | typing.SupportsIndex = 0, device: Device | str | None = None) -> None:
        """
        -initWithMean:variance: with keywords only (device None: the Vectors', or the default device for arrays)
        """
    @property
    def mean(self) -> typing.Any:
        """
        -mean as a writable (C,) view
        """
    @property
    def mean_vector(self) -> Vector:
        """
        A Vector aliasing -mean (MPSVector initWithBuffer:state.mean ...)
        """
    @property
    def number_of_feature_channels(self) -> int:
        ...
    @property
    def variance(self) -> typing.Any:
        """
        -variance as a writable (C,) view
        """
    @property
    def variance_vector(self) -> Vector:
        """
        A Vector aliasing -variance
        """
class CNNBatchNormalizationState(NNGradientState):
    """
    MPSCNNBatchNormalizationState, made by CNNBatchNormalization.result_state / temporary_result_state. Its buffers are (C,) float32 views, valid once the command buffer that wrote them has completed.
    """
    def reset(self) -> None:
        """
        -reset: forget the accumulated statistics and gradients
        """
    @property
    def batch_normalization(self) -> typing.Any:
        """
        -batchNormalization: the CNNBatchNormalization that made the state
        """
    @property
    def beta(self) -> typing.Any:
        """
        -beta: the beta the forward pass used
        """
    @property
    def gamma(self) -> typing.Any:
        """
        -gamma: the gamma the forward pass used
        """
    @property
    def gradient_for_beta(self) -> typing.Any:
        """
        -gradientForBeta: sum over the batch of G' (None until a statistics gradient has been encoded)
        """
    @property
    def gradient_for_gamma(self) -> typing.Any:
        """
        -gradientForGamma: sum over the batch of G'·x̂ (None until a statistics gradient has been encoded)
        """
    @property
    def mean(self) -> typing.Any:
        """
        -mean: the batch mean (or the data source's mean after an inference forward)
        """
    @property
    def number_of_feature_channels(self) -> int:
        ...
    @property
    def variance(self) -> typing.Any:
        """
        -variance: the biased batch variance (or the data source's after an inference forward)
        """
    @property
    def gamma_vector(self) -> Vector:
        """
        A Vector aliasing the state's gamma buffer (C floats)
        """
    @property
    def beta_vector(self) -> Vector:
        """
        A Vector aliasing the state's beta buffer (C floats)
        """
    @property
    def mean_vector(self) -> Vector:
        """
        A Vector aliasing the state's mean buffer (C floats)
        """
    @property
    def variance_vector(self) -> Vector:
        """
        A Vector aliasing the state's variance buffer (C floats)
        """
    @property
    def gradient_for_gamma_vector(self) -> Vector:
        """
        A Vector aliasing the state's gradient_for_gamma buffer (C floats)
        """
    @property
    def gradient_for_beta_vector(self) -> Vector:
        """
        A Vector aliasing the state's gradient_for_beta buffer (C floats)
        """
class CNNBatchNormalizationDataSource:
    """
    @protocol MPSCNNBatchNormalizationDataSource. Any Python object with number_of_feature_channels(), gamma(), beta() (None: no bias), mean(), variance(), load(), purge() (and optionally label(), epsilon(); without epsilon() the kernel uses FLT_MIN) can be passed where a data source is expected. The optional update methods are called by the application.
    """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
class CNNBatchNormalizationWeightsDataSource(CNNBatchNormalizationDataSource):
    """
    A ready-made MPSCNNBatchNormalizationDataSource holding gamma, beta, mean and variance in memory (the methods return writable views: change them, then call the kernel's reload_*_from_data_source()). Its CPU-style update methods apply gamma -= learning_rate·dγ, beta -= learning_rate·dβ and the running average mean = (1-momentum)·mean + momentum·batch_mean, variance likewise (with the batch variance made unbiased, M/(M-1), when unbiased_running_variance, as torch.nn.BatchNorm2d).
    """
    unbiased_running_variance: bool
    def __init__(self, gamma: typing.Any, beta: typing.Any = None, mean: typing.Any = None, variance: typing.Any = None, epsilon: typing.Any = None, label: str = '') -> None:
        """
        mean defaults to zeros, variance to ones; epsilon None: the protocol's default (FLT_MIN)
        """
    def beta(self) -> typing.Any:
        """
        -beta (a writable view, or None)
        """
    def epsilon(self) -> typing.Any:
        """
        -epsilon
        """
    def gamma(self) -> typing.Any:
        """
        -gamma (a writable view)
        """
    def label(self) -> str:
        """
        -label
        """
    def load(self) -> bool:
        """
        -load
        """
    def mean(self) -> typing.Any:
        """
        -mean (a writable view)
        """
    def number_of_feature_channels(self) -> int:
        """
        -numberOfFeatureChannels
        """
    def purge(self) -> None:
        """
        -purge
        """
    def update_gamma_and_beta_with_batch_normalization_state(self, batch_normalization_state: typing.Any) -> bool:
        """
        -updateGammaAndBetaWithBatchNormalizationState: (CPU style; the command buffer must have completed; decrements a temporary state's read count)
        """
    def update_mean_and_variance_with_batch_normalization_state(self, batch_normalization_state: typing.Any) -> bool:
        """
        -updateMeanAndVarianceWithBatchNormalizationState: (CPU style; decrements a temporary state's read count)
        """
    def variance(self) -> typing.Any:
        """
        -variance (a writable view)
        """
    @property
    def learning_rate(self) -> float:
        ...
    @learning_rate.setter
    def learning_rate(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def momentum(self) -> float:
        ...
    @momentum.setter
    def momentum(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class CNNBatchNormalization(CNNKernel):
    """
    MPSCNNBatchNormalization: z = (X - mean)·gamma/sqrt(variance + epsilon) + beta, Y = f(z) with the optional fused neuron f. With a batch_normalization_state on which CNNBatchNormalizationStatistics has run, mean and variance are the batch statistics (training); otherwise the data source's (inference).
    """
    def __init__(self, device: Device | str, data_source: typing.Any, fused_neuron_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:dataSource:[fusedNeuronDescriptor:]
        """
    def encode(self, command_buffer: CommandBuffer, source_image: typing.Any, batch_normalization_state: typing.Any = None, destination_image: typing.Any = None) -> Image:
        """
        -encodeToCommandBuffer:sourceImage:batchNormalizationState:destinationImage: (a temporary state's read count is decremented). Without a state: inference with the data source's statistics. Without a destination one is allocated and returned (the source must then have number_of_images == 1).
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, batch_normalization_state: typing.Any = None, destination_images: typing.Any = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceImages:batchNormalizationState:destinationImages: (without destination_images they are allocated and returned; the sources must then have number_of_images == 1)
        """
    def reload_gamma_and_beta_from_data_source(self) -> None:
        """
        -reloadGammaAndBetaFromDataSource
        """
    def reload_gamma_and_beta_with_command_buffer(self, command_buffer: CommandBuffer, gamma_and_beta_state: typing.Any) -> None:
        """
        -reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (decrements a temporary state's read count)
        """
    def reload_mean_and_variance_from_data_source(self) -> None:
        """
        -reloadMeanAndVarianceFromDataSource
        """
    def reload_mean_and_variance_with_command_buffer(self, command_buffer: CommandBuffer, mean_and_variance_state: typing.Any) -> None:
        """
        -reloadMeanAndVarianceWithCommandBuffer:meanAndVarianceState: (decrements a temporary state's read count)
        """
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def epsilon(self) -> float:
        """
        MPSCNNBatchNormalization.epsilon (> 0; the data source's epsilon(), else FLT_MIN)
        """
    @epsilon.setter
    def epsilon(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def fused_neuron_descriptor(self) -> typing.Any:
        ...
    @property
    def number_of_feature_channels(self) -> int:
        ...
class CNNBatchNormalizationStatistics(CNNKernel):
    """
    MPSCNNBatchNormalizationStatistics: the per-channel mean and biased variance over every pixel of the batch, written to the state. Successive encode_batch calls on sub-batches accumulate until another kernel of the family encodes with the state (or reset()).
    """
    def __init__(self, device: Device | str) -> None:
        """
        -initWithDevice:
        """
    def encode(self, *args, **kwargs) -> None:
        """
        Unavailable (as in MPS): use encode_batch.
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, batch_normalization_state: typing.Any) -> None:
        """
        -encodeBatchToCommandBuffer:sourceImages:batchNormalizationState: (the only encode MPS provides)
        """
class CNNBatchNormalizationStatisticsGradient(CNNGradientKernel):
    """
    MPSCNNBatchNormalizationStatisticsGradient: gradient_for_beta = sum G', gradient_for_gamma = sum G'·x̂ over the batch, G' = G·f'(z) for the fused neuron (which must match the forward's). Successive encode_batch calls on sub-batches add into the state.
    """
    def __init__(self, device: Device | str, fused_neuron_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:fusedNeuronDescriptor:
        """
    def encode(self, *args, **kwargs) -> None:
        """
        Unavailable (as in MPS): use encode_batch.
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_gradients: typing.Any, source_images: typing.Any, batch_normalization_state: typing.Any) -> None:
        """
        -encodeBatchToCommandBuffer:sourceGradients:sourceImages:batchNormalizationState: (a temporary state's read count is decremented)
        """
    @property
    def fused_neuron_descriptor(self) -> typing.Any:
        ...
class CNNBatchNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNBatchNormalizationGradient: dX = gamma/sqrt(var+eps)·(G' - dβ/M - x̂·dγ/M) with the state's statistics and the statistics gradient's dγ, dβ (which must have been encoded first). training_statistics=False gives the inference-mode gradient gamma/sqrt(var+eps)·G'. Every CNNGradientKernel encode form; gradient_state / gradient_states is the CNNBatchNormalizationState.
    """
    def __init__(self, device: Device | str, fused_neuron_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:fusedNeuronDescriptor:
        """
    @property
    def fused_neuron_descriptor(self) -> typing.Any:
        ...
    @property
    def training_statistics(self) -> bool:
        """
        mpsgrad extension (spec §2.5): True (default, MPS) differentiates through the batch statistics; False treats mean and variance as constants
        """
    @training_statistics.setter
    def training_statistics(self, arg0: bool) -> None:
        ...
class CNNInstanceNormalizationDataSource:
    """
    @protocol MPSCNNInstanceNormalizationDataSource. Any Python object with number_of_feature_channels(), gamma() and beta() (None: no bias) can be passed where a data source is expected; label(), epsilon() (default FLT_MIN), load() and purge() are optional. The optional update methods update_gamma_and_beta_with_command_buffer(command_buffer, instance_normalization_state_batch) (GPU style: return a CNNNormalizationGammaAndBetaState for reload_gamma_and_beta_with_command_buffer) and update_gamma_and_beta_with_instance_normalization_state_batch(states) (CPU style) are called by the application; they receive one state per image and should sum the gradients over the batch.
    """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
class CNNInstanceNormalizationWeightsDataSource(CNNInstanceNormalizationDataSource):
    """
    A ready-made MPSCNNInstanceNormalizationDataSource holding gamma and beta in memory (the methods return writable views: change them, then call the kernel's reload_gamma_and_beta_from_data_source()). Its CPU-style update applies gamma -= learning_rate·Σ dγ, beta -= learning_rate·Σ dβ, summed over the batch of states.
    """
    def __init__(self, gamma: typing.Any, beta: typing.Any = None, epsilon: typing.Any = None, label: str = '', learning_rate: typing.Any = 0.009999999776482582) -> None:
        """
        epsilon None: the protocol's default (FLT_MIN)
        """
    def beta(self) -> typing.Any:
        """
        -beta (a writable view, or None)
        """
    def epsilon(self) -> float:
        """
        -epsilon
        """
    def gamma(self) -> typing.Any:
        """
        -gamma (a writable view)
        """
    def label(self) -> str:
        """
        -label
        """
    def load(self) -> bool:
        """
        -load
        """
    def number_of_feature_channels(self) -> int:
        """
        -numberOfFeatureChannels
        """
    def purge(self) -> None:
        """
        -purge
        """
    def update_gamma_and_beta_with_instance_normalization_state_batch(self, instance_normalization_state_batch: typing.Any) -> bool:
        """
        -updateGammaAndBetaWithInstanceNormalizationStateBatch: (CPU style; the states' command buffer must have completed; decrements each temporary state's read count)
        """
    @property
    def learning_rate(self) -> float:
        """
        the SGD step of the update method
        """
    @learning_rate.setter
    def learning_rate(self, arg1: typing.Any) -> None:
        ...
class CNNInstanceNormalizationGradientState(NNGradientState):
    """
    MPSCNNInstanceNormalizationGradientState, made by CNNInstanceNormalization.result_state / temporary_result_state (one per image). Its buffers are (C,) float32 views, valid once the command buffer that wrote them has completed.
    """
    @property
    def beta(self) -> typing.Any:
        """
        -beta: the (C,) beta the forward pass used
        """
    @property
    def gamma(self) -> typing.Any:
        """
        -gamma: the (C,) gamma the forward pass used
        """
    @property
    def gradient_for_beta(self) -> typing.Any:
        """
        -gradientForBeta: (C,) sum over the pixels of G (None until the gradient kernel has encoded)
        """
    @property
    def gradient_for_gamma(self) -> typing.Any:
        """
        -gradientForGamma: (C,) sum over the pixels of G·x̂ (None until the gradient kernel has encoded)
        """
    @property
    def instance_normalization(self) -> typing.Any:
        """
        -instanceNormalization: the kernel that made the state
        """
    @property
    def number_of_feature_channels(self) -> int:
        ...
    @property
    def number_of_groups(self) -> int:
        """
        mpsgrad: the groups the statistics were taken over (channels for instance normalization)
        """
class CNNInstanceNormalization(CNNKernel):
    """
    MPSCNNInstanceNormalization: Y = (X - mean)·gamma/sqrt(variance + epsilon) + beta with mean and (biased) variance per image and channel over the pixels. Encode with a destination_state (from result_state) to train; CNNInstanceNormalizationGradient then reads it.
    """
    def __init__(self, device: Device | str, data_source: typing.Any) -> None:
        """
        -initWithDevice:dataSource:
        """
    def reload_gamma_and_beta_from_data_source(self) -> None:
        """
        -reloadGammaAndBetaFromDataSource
        """
    def reload_gamma_and_beta_with_command_buffer(self, command_buffer: CommandBuffer, gamma_and_beta_state: typing.Any) -> None:
        """
        -reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (an encoded copy; decrements a temporary state's read count)
        """
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def epsilon(self) -> float:
        """
        epsilon (finite, > 0; the data source's epsilon(), else FLT_MIN)
        """
    @epsilon.setter
    def epsilon(self, arg1: typing.Any) -> None:
        ...
    @property
    def number_of_feature_channels(self) -> int:
        ...
class CNNInstanceNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNInstanceNormalizationGradient: dX = r·(gamma·G - mean(gamma·G) - x̂·mean(gamma·G·x̂)) per image and channel, and the state's gradient_for_gamma / gradient_for_beta. Every CNNGradientKernel encode form; gradient_state is the image's CNNInstanceNormalizationGradientState.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -initWithDevice:
        """
class CNNGroupNormalizationDataSource:
    """
    @protocol MPSCNNGroupNormalizationDataSource. Any Python object with number_of_feature_channels(), number_of_groups(), gamma() and beta() (None: no bias; both per channel) can be passed where a data source is expected; label(), epsilon() (default FLT_MIN), load() and purge() are optional. The optional update methods update_gamma_and_beta_with_command_buffer(command_buffer, group_normalization_state_batch) (GPU style) and update_gamma_and_beta_with_group_normalization_state_batch(states) (CPU style) are called by the application.
    """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
class CNNGroupNormalizationWeightsDataSource(CNNGroupNormalizationDataSource):
    """
    A ready-made MPSCNNGroupNormalizationDataSource holding gamma, beta (per channel) and the number of groups. Its CPU-style update applies SGD with the gradients summed over the batch of states.
    """
    def __init__(self, gamma: typing.Any, beta: typing.Any = None, number_of_groups: typing.Any = 1, epsilon: typing.Any = None, label: str = '', learning_rate: typing.Any = 0.009999999776482582) -> None:
        """
        number_of_groups must divide len(gamma); epsilon None: the protocol's default (FLT_MIN)
        """
    def beta(self) -> typing.Any:
        """
        -beta (a writable view, or None)
        """
    def epsilon(self) -> float:
        """
        -epsilon
        """
    def gamma(self) -> typing.Any:
        """
        -gamma (a writable view)
        """
    def label(self) -> str:
        """
        -label
        """
    def load(self) -> bool:
        """
        -load
        """
    def number_of_feature_channels(self) -> int:
        """
        -numberOfFeatureChannels
        """
    def number_of_groups(self) -> int:
        """
        -numberOfGroups
        """
    def purge(self) -> None:
        """
        -purge
        """
    def set_number_of_groups(self, number_of_groups: typing.Any) -> None:
        """
        -setNumberOfGroups: (kernels read the number of groups when they are made)
        """
    def update_gamma_and_beta_with_group_normalization_state_batch(self, group_normalization_state_batch: typing.Any) -> bool:
        """
        -updateGammaAndBetaWithGroupNormalizationStateBatch: (CPU style; decrements each temporary state's read count)
        """
    @property
    def learning_rate(self) -> float:
        """
        the SGD step of the update method
        """
    @learning_rate.setter
    def learning_rate(self, arg1: typing.Any) -> None:
        ...
class CNNGroupNormalizationGradientState(NNGradientState):
    """
    MPSCNNGroupNormalizationGradientState, made by CNNGroupNormalization.result_state / temporary_result_state (one per image).
    """
    @property
    def beta(self) -> typing.Any:
        """
        -beta: the (C,) beta the forward pass used
        """
    @property
    def gamma(self) -> typing.Any:
        """
        -gamma: the (C,) gamma the forward pass used
        """
    @property
    def gradient_for_beta(self) -> typing.Any:
        """
        -gradientForBeta: (C,) sum over the pixels of G (None until the gradient kernel has encoded)
        """
    @property
    def gradient_for_gamma(self) -> typing.Any:
        """
        -gradientForGamma: (C,) sum over the pixels of G·x̂ (None until the gradient kernel has encoded)
        """
    @property
    def group_normalization(self) -> typing.Any:
        """
        -groupNormalization: the kernel that made the state
        """
    @property
    def number_of_feature_channels(self) -> int:
        ...
    @property
    def number_of_groups(self) -> int:
        """
        mpsgrad: the groups the statistics were taken over (channels for instance normalization)
        """
class CNNGroupNormalization(CNNKernel):
    """
    MPSCNNGroupNormalization: the channels are split into number_of_groups groups of consecutive channels; Y = (X - mean)·gamma/sqrt(variance + epsilon) + beta with mean and (biased) variance per image and group, gamma and beta per channel.
    """
    def __init__(self, device: Device | str, data_source: typing.Any) -> None:
        """
        -initWithDevice:dataSource:
        """
    def reload_gamma_and_beta_from_data_source(self) -> None:
        """
        -reloadGammaAndBetaFromDataSource
        """
    def reload_gamma_and_beta_with_command_buffer(self, command_buffer: CommandBuffer, gamma_and_beta_state: typing.Any) -> None:
        """
        -reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (an encoded copy; decrements a temporary state's read count)
        """
    @property
    def data_source(self) -> typing.Any:
        ...
    @property
    def epsilon(self) -> float:
        """
        epsilon (finite, > 0; the data source's epsilon(), else FLT_MIN)
        """
    @epsilon.setter
    def epsilon(self, arg1: typing.Any) -> None:
        ...
    @property
    def number_of_feature_channels(self) -> int:
        ...
    @property
    def number_of_groups(self) -> int:
        """
        the data source's number_of_groups() when the kernel was made
        """
class CNNGroupNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNGroupNormalizationGradient: dX per image and group, and the state's gradient_for_gamma / gradient_for_beta. Every CNNGradientKernel encode form.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -initWithDevice:
        """
class VectorDescriptor:
    """
    MPSVectorDescriptor: `vectors` vectors of `length` float32 elements, `vector_bytes` apart
    """
    @staticmethod
    def vector_bytes_for_length(length: typing.SupportsInt | typing.SupportsIndex, data_type: DataType = ...) -> int:
        """
        +vectorBytesForLength:dataType:
        """
    def __init__(self, length: typing.SupportsInt | typing.SupportsIndex, vectors: typing.SupportsInt | typing.SupportsIndex = 1, vector_bytes: typing.Any = None, data_type: DataType = ...) -> None:
        """
        +vectorDescriptorWithLength:[vectors:vectorBytes:]dataType: (vector_bytes None: length * 4)
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def data_type(self) -> DataType:
        ...
    @property
    def length(self) -> int:
        ...
    @property
    def vector_bytes(self) -> int:
        ...
    @property
    def vectors(self) -> int:
        ...
class Vector:
    """
    MPSVector: float32 vectors in device memory. numpy() is a zero-copy view of the storage (read it after the command buffer that wrote it completed; write it before encoding).
    """
    @staticmethod
    def from_numpy(array: typing.Any, device: Device | str = None) -> Vector:
        """
        A new Vector holding a copy of a (length,) or (vectors, length) array
        """
    @typing.overload
    def __init__(self, device: Device | str, descriptor: VectorDescriptor | int) -> None:
        """
        -[MPSVector initWithDevice:descriptor:] (zero-filled); descriptor may be a length
        """
    @typing.overload
    def __init__(self, *, buffer: Vector | numpy.typing.NDArray[numpy.float32], descriptor: VectorDescriptor | int, offset: typing.SupportsInt | typing.SupportsIndex = 0, device: Device | str | None = None) -> None:
        """
        -[MPSVector initWithBuffer:offset:descriptor:] (and -initWithBuffer:descriptor:): a Vector over another object's memory, no copy. `buffer` is a Vector (offset counts bytes from its first element; its device) or a writable C-contiguous float32 NumPy array (the cpu device only). `offset` must be a multiple of 4 and the buffer must hold the descriptor's span after it (ValueError).
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def numpy(self) -> numpy.ndarray:
        """
        Zero-copy writable view: (length,) or (vectors, length)
        """
    def to_numpy(self) -> typing.Any:
        """
        A copy of the elements
        """
    @property
    def data_type(self) -> DataType:
        ...
    @property
    def device(self) -> Device:
        ...
    @property
    def length(self) -> int:
        ...
    @property
    def offset(self) -> int:
        ...
    @property
    def resource_size(self) -> int:
        """
        -[MPSVector resourceSize]
        """
    @property
    def vector_bytes(self) -> int:
        ...
    @property
    def vectors(self) -> int:
        ...
class NNRegularizationType:
    """
    MPSNNRegularizationType
    
    Members:
    
      NONE
    
      L1
    
      L2
    """
    L1: typing.ClassVar[NNRegularizationType]
    L2: typing.ClassVar[NNRegularizationType]
    NONE: typing.ClassVar[NNRegularizationType]
    __members__: typing.ClassVar[dict[str, NNRegularizationType]]
    @typing.overload
    def __eq__(self, other: NNRegularizationType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: NNRegularizationType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class NNOptimizerDescriptor:
    """
    MPSNNOptimizerDescriptor. Gradient preprocessing per element: g = clamp(g, gradient_clip_min, gradient_clip_max) if apply_gradient_clipping; g = gradient_rescale * g; g += regularization_scale * sign(w) (L1) or * w (L2).
    """
    apply_gradient_clipping: bool
    regularization_type: NNRegularizationType
    def __init__(self, learning_rate: typing.SupportsFloat | typing.SupportsIndex = 0.0010000000474974513, gradient_rescale: typing.SupportsFloat | typing.SupportsIndex = 1.0, apply_gradient_clipping: bool = False, gradient_clip_max: typing.SupportsFloat | typing.SupportsIndex = 3.4028234663852886e+38, gradient_clip_min: typing.SupportsFloat | typing.SupportsIndex = -3.4028234663852886e+38, regularization_type: NNRegularizationType = ..., regularization_scale: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        """
        -initWithLearningRate:gradientRescale:[applyGradientClipping:gradientClipMax:gradientClipMin:]regularizationType:regularizationScale:
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def gradient_clip_max(self) -> float:
        ...
    @gradient_clip_max.setter
    def gradient_clip_max(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def gradient_clip_min(self) -> float:
        ...
    @gradient_clip_min.setter
    def gradient_clip_min(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def gradient_rescale(self) -> float:
        ...
    @gradient_rescale.setter
    def gradient_rescale(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def learning_rate(self) -> float:
        ...
    @learning_rate.setter
    def learning_rate(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def regularization_scale(self) -> float:
        ...
    @regularization_scale.setter
    def regularization_scale(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class NNOptimizer(Kernel):
    """
    MPSNNOptimizer (abstract): the descriptor's fields, read-only except as noted
    """
    def set_learning_rate(self, learning_rate: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        -setLearningRate:
        """
    @property
    def apply_gradient_clipping(self) -> bool:
        """
        MPSNNOptimizer.applyGradientClipping (read/write)
        """
    @apply_gradient_clipping.setter
    def apply_gradient_clipping(self, arg1: bool) -> None:
        ...
    @property
    def gradient_clip_max(self) -> float:
        ...
    @property
    def gradient_clip_min(self) -> float:
        ...
    @property
    def gradient_rescale(self) -> float:
        ...
    @property
    def learning_rate(self) -> float:
        ...
    @property
    def regularization_scale(self) -> float:
        ...
    @property
    def regularization_type(self) -> NNRegularizationType:
        ...
class NNOptimizerStochasticGradientDescent(NNOptimizer):
    """
    MPSNNOptimizerStochasticGradientDescent: m = mu*m + lr*g, w -= m; Nesterov: m = mu*m + g, w -= lr*(g + mu*m); no momentum vector: w -= lr*g
    """
    def __init__(self, device: Device | str, learning_rate: typing.Any = None, *, momentum_scale: typing.SupportsFloat | typing.SupportsIndex = 0.0, use_nesterov_momentum: typing.Any = None, use_nestrov_momentum: typing.Any = None, optimizer_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:learningRate: / -initWithDevice:momentumScale:useNestrovMomentum:optimizerDescriptor:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, input_gradient_vector: Vector, input_values_vector: Vector, input_momentum_vector: Vector = None, result_values_vector: Vector = None) -> None:
        """
        -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:resultValuesVector: (result None: in place)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, convolution_gradient_state: CNNConvolutionGradientState, convolution_source_state: CNNConvolutionWeightsAndBiasesState, input_momentum_vectors: typing.Any = None, result_state: CNNConvolutionWeightsAndBiasesState = None) -> None:
        """
        -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:resultState: ([weights] or [weights, biases]; result None: in place)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_gradient_state: CNNBatchNormalizationState, batch_normalization_source_state: CNNBatchNormalizationState, input_momentum_vectors: typing.Any = None, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:inputMomentumVectors:resultState: (batch_normalization_gradient_state + batch_normalization_source_state form)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState, input_momentum_vectors: typing.Any = None, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:resultState: ([gamma] or [gamma, beta]; result_state, a CNNNormalizationGammaAndBetaState, is required)
        """
    @property
    def momentum_scale(self) -> float:
        ...
    @property
    def use_nesterov_momentum(self) -> bool:
        ...
    @property
    def use_nestrov_momentum(self) -> bool:
        """
        MPS's original (misspelled) name of use_nesterov_momentum
        """
class NNOptimizerRMSProp(NNOptimizer):
    """
    MPSNNOptimizerRMSProp: s = decay*s + (1-decay)*g^2, w -= lr*g/(sqrt(s) + epsilon)
    """
    def __init__(self, device: Device | str, learning_rate: typing.Any = None, *, decay: typing.SupportsFloat | typing.SupportsIndex = 0.9, epsilon: typing.SupportsFloat | typing.SupportsIndex = 9.99999993922529e-09, optimizer_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:learningRate: / -initWithDevice:decay:epsilon:optimizerDescriptor:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, input_gradient_vector: Vector, input_values_vector: Vector, input_sum_of_squares_vector: Vector, result_values_vector: Vector = None) -> None:
        """
        -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputSumOfSquaresVector:resultValuesVector:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, convolution_gradient_state: CNNConvolutionGradientState, convolution_source_state: CNNConvolutionWeightsAndBiasesState, input_sum_of_squares_vectors: typing.Any, result_state: CNNConvolutionWeightsAndBiasesState = None) -> None:
        """
        -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputSumOfSquaresVectors:resultState:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_gradient_state: CNNBatchNormalizationState, batch_normalization_source_state: CNNBatchNormalizationState, input_sum_of_squares_vectors: typing.Any, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:inputSumOfSquaresVectors:resultState: (batch_normalization_gradient_state + batch_normalization_source_state form)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState, input_sum_of_squares_vectors: typing.Any, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationState:inputSumOfSquaresVectors:resultState: ([gamma] or [gamma, beta]; result_state required)
        """
    @property
    def decay(self) -> float:
        ...
    @property
    def epsilon(self) -> float:
        ...
class NNOptimizerAdam(NNOptimizer):
    """
    MPSNNOptimizerAdam: t += 1; lr_t = lr*sqrt(1-beta2^t)/(1-beta1^t); m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g^2; AMSGrad: vmax = max(vmax, v) replaces v; w -= lr_t*m/(sqrt(v) + epsilon). Every encode advances time_step by one.
    """
    def __init__(self, device: Device | str, learning_rate: typing.Any = None, *, beta1: typing.SupportsFloat | typing.SupportsIndex = 0.9, beta2: typing.SupportsFloat | typing.SupportsIndex = 0.999, epsilon: typing.SupportsFloat | typing.SupportsIndex = 9.99999993922529e-09, time_step: typing.SupportsInt | typing.SupportsIndex = 0, optimizer_descriptor: typing.Any = None) -> None:
        """
        -initWithDevice:learningRate: / -initWithDevice:beta1:beta2:epsilon:timeStep:optimizerDescriptor:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, input_gradient_vector: Vector, input_values_vector: Vector, input_momentum_vector: Vector, input_velocity_vector: Vector, maximum_velocity_vector: Vector = None, result_values_vector: Vector = None) -> None:
        """
        -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:inputVelocityVector:[maximumVelocityVector:]resultValuesVector: (maximum_velocity_vector: AMSGrad)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, convolution_gradient_state: CNNConvolutionGradientState, convolution_source_state: CNNConvolutionWeightsAndBiasesState, input_momentum_vectors: typing.Any, input_velocity_vectors: typing.Any, maximum_velocity_vectors: typing.Any = None, result_state: CNNConvolutionWeightsAndBiasesState = None) -> None:
        """
        -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:inputVelocityVectors:[maximumVelocityVectors:]resultState:
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_gradient_state: CNNBatchNormalizationState, batch_normalization_source_state: CNNBatchNormalizationState, input_momentum_vectors: typing.Any, input_velocity_vectors: typing.Any, maximum_velocity_vectors: typing.Any = None, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:inputMomentumVectors:inputVelocityVectors:[maximumVelocityVectors:]resultState: (batch_normalization_gradient_state + batch_normalization_source_state form)
        """
    @typing.overload
    def encode(self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState, input_momentum_vectors: typing.Any, input_velocity_vectors: typing.Any, maximum_velocity_vectors: typing.Any = None, result_state: CNNNormalizationGammaAndBetaState = None) -> None:
        """
        -encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:inputVelocityVectors:[maximumVelocityVectors:]resultState: ([gamma] or [gamma, beta]; result_state required)
        """
    @property
    def beta1(self) -> float:
        ...
    @property
    def beta2(self) -> float:
        ...
    @property
    def epsilon(self) -> float:
        ...
    @property
    def time_step(self) -> int:
        """
        MPSNNOptimizerAdam.timeStep: updates done so far (read/write)
        """
    @time_step.setter
    def time_step(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class CNNLossType:
    """
    MPSCNNLossType
    
    Members:
    
      MEAN_ABSOLUTE_ERROR
    
      MEAN_SQUARED_ERROR
    
      SOFTMAX_CROSS_ENTROPY
    
      SIGMOID_CROSS_ENTROPY
    
      CATEGORICAL_CROSS_ENTROPY
    
      HINGE
    
      HUBER
    
      COSINE_DISTANCE
    
      LOG
    
      KULLBACK_LEIBLER_DIVERGENCE
    """
    CATEGORICAL_CROSS_ENTROPY: typing.ClassVar[CNNLossType]
    COSINE_DISTANCE: typing.ClassVar[CNNLossType]
    HINGE: typing.ClassVar[CNNLossType]
    HUBER: typing.ClassVar[CNNLossType]
    KULLBACK_LEIBLER_DIVERGENCE: typing.ClassVar[CNNLossType]
    LOG: typing.ClassVar[CNNLossType]
    MEAN_ABSOLUTE_ERROR: typing.ClassVar[CNNLossType]
    MEAN_SQUARED_ERROR: typing.ClassVar[CNNLossType]
    SIGMOID_CROSS_ENTROPY: typing.ClassVar[CNNLossType]
    SOFTMAX_CROSS_ENTROPY: typing.ClassVar[CNNLossType]
    __members__: typing.ClassVar[dict[str, CNNLossType]]
    @typing.overload
    def __eq__(self, other: CNNLossType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CNNLossType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNReductionType:
    """
    MPSCNNReductionType
    
    Members:
    
      NONE
    
      SUM
    
      MEAN
    
      SUM_BY_NON_ZERO_WEIGHTS
    """
    MEAN: typing.ClassVar[CNNReductionType]
    NONE: typing.ClassVar[CNNReductionType]
    SUM: typing.ClassVar[CNNReductionType]
    SUM_BY_NON_ZERO_WEIGHTS: typing.ClassVar[CNNReductionType]
    __members__: typing.ClassVar[dict[str, CNNReductionType]]
    @typing.overload
    def __eq__(self, other: CNNReductionType) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CNNReductionType) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNLossDataDescriptor:
    """
    MPSCNNLossDataDescriptor: labels or weights data (copied) with its layout, size and strides
    """
    def __init__(self, data: typing.Any, layout: DataLayout = ..., size: typing.Any = None) -> None:
        """
        +cnnLossDataDescriptorWithData:layout:size: (size (width, height, channels); None: from a 3-D array of the layout's shape)
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def bytes_per_image(self) -> int:
        ...
    @bytes_per_image.setter
    def bytes_per_image(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def bytes_per_row(self) -> int:
        ...
    @bytes_per_row.setter
    def bytes_per_row(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def layout(self) -> DataLayout:
        ...
    @property
    def size(self) -> tuple[int, int, int]:
        """
        (width, height, channels)
        """
class CNNLossLabels(State):
    """
    MPSCNNLossLabels: the labels (and optional weights) of one image, and the loss image the loss writes
    """
    def __init__(self, device: Device | str, labels: typing.Any, loss_image_size: typing.Any = None, weights: typing.Any = None) -> None:
        """
        -initWithDevice:labelsDescriptor: / -initWithDevice:lossImageSize:labelsDescriptor:weightsDescriptor: (descriptors: the data is copied) / -initWithDevice:lossImageSize:labelsImage:weightsImage: (images: retained). loss_image_size: (1, 1, 1) (default) or, for reduction NONE, the labels' width and height with at most their channels (the source's). Labels and weights may have more channels than the loss source: the first ones are read
        """
    @property
    def labels_image(self) -> Image:
        """
        MPSCNNLossLabels.labelsImage
        """
    @property
    def loss_image(self) -> Image:
        """
        MPSCNNLossLabels.lossImage
        """
    @property
    def weights_image(self) -> Image:
        """
        MPSCNNLossLabels.weightsImage
        """
class CNNLossDescriptor:
    """
    MPSCNNLossDescriptor (+ scale_gradient_by_reduction, mpsgrad, default True)
    """
    loss_type: CNNLossType
    reduction_type: CNNReductionType
    def __init__(self, loss_type: CNNLossType, reduction_type: CNNReductionType) -> None:
        """
        +cnnLossDescriptorWithType:reductionType:
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def delta(self) -> float:
        """
        Huber [1.0]
        """
    @delta.setter
    def delta(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def epsilon(self) -> float:
        """
        Log loss [1e-7]
        """
    @epsilon.setter
    def epsilon(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def label_smoothing(self) -> float:
        """
        [0.0]
        """
    @label_smoothing.setter
    def label_smoothing(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def number_of_classes(self) -> int:
        """
        [1]
        """
    @number_of_classes.setter
    def number_of_classes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def reduce_across_batch(self) -> bool:
        """
        one loss value for the whole batch of a batch encode [False]
        """
    @reduce_across_batch.setter
    def reduce_across_batch(self, arg0: bool) -> None:
        ...
    @property
    def scale_gradient_by_reduction(self) -> bool:
        """
        the gradient is that of the reduced loss (MEAN / SUM_BY_NON_ZERO_WEIGHTS divide it) [True]
        """
    @scale_gradient_by_reduction.setter
    def scale_gradient_by_reduction(self, arg0: bool) -> None:
        ...
    @property
    def weight(self) -> float:
        """
        scalar weight when the labels have no weights [1.0]
        """
    @weight.setter
    def weight(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class CNNLoss(CNNKernel):
    """
    MPSCNNLoss: forward and backward in one encode; the destination receives dL/dy, labels.loss_image the loss
    """
    def __init__(self, device: Device | str, loss_descriptor: CNNLossDescriptor) -> None:
        """
        -[MPSCNNLoss initWithDevice:lossDescriptor:]
        """
    def encode(self, command_buffer: CommandBuffer, source_image: Image, labels: CNNLossLabels, destination_image: typing.Any = None) -> Image:
        """
        -encodeToCommandBuffer:sourceImage:labels:[destinationImage:]; returns the gradient image
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, labels: typing.Any, destination_images: typing.Any = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceImages:labels:[destinationImages:]; returns the gradient images
        """
    @property
    def delta(self) -> float:
        ...
    @property
    def epsilon(self) -> float:
        ...
    @property
    def label_smoothing(self) -> float:
        ...
    @property
    def loss_type(self) -> CNNLossType:
        ...
    @property
    def number_of_classes(self) -> int:
        ...
    @property
    def reduce_across_batch(self) -> bool:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        ...
    @property
    def weight(self) -> float:
        ...
class NNLossKernel:
    """
    The properties NNForwardLoss and NNLossGradient share (set: ValueError if invalid)
    """
    @property
    def delta(self) -> float:
        ...
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def epsilon(self) -> float:
        ...
    @epsilon.setter
    def epsilon(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def label_smoothing(self) -> float:
        ...
    @label_smoothing.setter
    def label_smoothing(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def loss_type(self) -> CNNLossType:
        ...
    @property
    def number_of_classes(self) -> int:
        ...
    @property
    def reduce_across_batch(self) -> bool:
        """
        macOS 11: one loss for the whole batch
        """
    @reduce_across_batch.setter
    def reduce_across_batch(self, arg1: bool) -> None:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        ...
    @property
    def weight(self) -> float:
        ...
    @weight.setter
    def weight(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class NNForwardLoss(CNNKernel, NNLossKernel):
    """
    MPSNNForwardLoss: the loss alone; the destination receives the loss (source-sized for reduction NONE, else 1x1x1 per image)
    """
    def __init__(self, device: Device | str, loss_descriptor: CNNLossDescriptor) -> None:
        """
        -[MPSNNForwardLoss initWithDevice:lossDescriptor:]
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, labels: typing.Any, weights: typing.Any = None, destination_images: typing.Any = None, *, destination_states: typing.Any = None, destination_state_is_temporary: typing.Any = None) -> typing.Any:
        """
        -encodeBatchToCommandBuffer:sourceImages:labels:weights:destinationStates:destinationImages: (labels, weights: image batches; destination_states: from result_state_batch, they receive the dynamic properties for NNLossGradient; returns the loss images). With destination_state_is_temporary=True/False: ...weights:destinationStates:destinationStateIsTemporary:, returns (loss images, states).
        """
    def result_state_batch(self, source_images: typing.Any, source_states: typing.Any = None, destination_images: typing.Any = None) -> list:
        """
        -resultStateBatchForSourceImage:sourceStates:destinationImage: (one gradient state per source)
        """
    def temporary_result_state_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, source_states: typing.Any = None, destination_images: typing.Any = None) -> list:
        """
        -temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:
        """
class NNLossGradient(CNNBinaryKernel, NNLossKernel):
    """
    MPSNNLossGradient: destination = source_gradient * d(loss)/d(prediction) (compute_label_gradients: d(loss)/d(labels)); source_gradient is 1x1x1 per image for a reduced loss (broadcast).
    """
    def __init__(self, device: Device | str, loss_descriptor: CNNLossDescriptor) -> None:
        """
        -[MPSNNLossGradient initWithDevice:lossDescriptor:]
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_gradients: typing.Any, source_images: typing.Any, labels: typing.Any, weights: typing.Any = None, destination_gradients: typing.Any = None, *, source_states: typing.Any = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:sourceStates:[destinationGradients:] (source_states: NNForwardLoss's destination states, whose weight, label_smoothing, epsilon and delta replace the kernel's; returns the gradient images)
        """
    @property
    def compute_label_gradients(self) -> bool:
        """
        MPSNNLossGradient.computeLabelGradients: the destination receives the gradient with respect to the labels instead of the predictions [False]
        """
    @compute_label_gradients.setter
    def compute_label_gradients(self, arg1: typing.Any) -> None:
        ...
class NNInitialGradient(CNNKernel):
    """
    MPSNNInitialGradient: an image of the source's size filled with 1.0
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSNNInitialGradient initWithDevice:]
        """
    def encode(self, command_buffer: CommandBuffer, source_image: Image, destination_image: typing.Any = None) -> Image:
        """
        -encodeToCommandBuffer:sourceImage:[destinationImage:]
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, destination_images: typing.Any = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceImages:[destinationImages:]
        """
class CNNYOLOLossDescriptor:
    """
    MPSCNNYOLOLossDescriptor: per anchor box X Y W H C F0..F(K-1) channels, K = classes_loss_descriptor.number_of_classes (docs/losses_and_optimizers.md, YOLO loss). Validated when a CNNYOLOLoss is made (ValueError naming the field).
    """
    @staticmethod
    def cnn_loss_descriptor_with_xy_loss_type(xy_loss_type: CNNLossType, wh_loss_type: CNNLossType, confidence_loss_type: CNNLossType, classes_loss_type: CNNLossType, reduction_type: CNNReductionType, anchor_boxes: typing.Any, number_of_anchor_boxes: typing.SupportsInt | typing.SupportsIndex) -> CNNYOLOLossDescriptor:
        """
        +cnnLossDescriptorWithXYLossType:WHLossType:confidenceLossType:classesLossType:reductionType:anchorBoxes:numberOfAnchorBoxes: (anchor_boxes: bytes of float32 (width, height) pairs, or a sequence of floats; every part descriptor gets reduction_type)
        """
    def __init__(self, xy_loss_type: CNNLossType, wh_loss_type: CNNLossType, confidence_loss_type: CNNLossType, classes_loss_type: CNNLossType, reduction_type: CNNReductionType, anchor_boxes: typing.Any, number_of_anchor_boxes: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +cnnLossDescriptorWithXYLossType:WHLossType:confidenceLossType:classesLossType:reductionType:anchorBoxes:numberOfAnchorBoxes: (anchor_boxes: bytes of float32 (width, height) pairs, or a sequence of floats; every part descriptor gets reduction_type)
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def anchor_boxes(self) -> bytes:
        """
        float32 (width, height) pairs in grid-cell units, as bytes (MPS NSData); set from bytes or a sequence of floats
        """
    @anchor_boxes.setter
    def anchor_boxes(self, arg1: typing.Any) -> None:
        ...
    @property
    def classes_loss_descriptor(self) -> CNNLossDescriptor:
        """
        classesLossDescriptor (raw class scores; its number_of_classes is K)
        """
    @classes_loss_descriptor.setter
    def classes_loss_descriptor(self, arg0: CNNLossDescriptor) -> None:
        ...
    @property
    def confidence_loss_descriptor(self) -> CNNLossDescriptor:
        """
        confidenceLossDescriptor (SIGMOID_CROSS_ENTROPY: raw C, else sigmoid(C))
        """
    @confidence_loss_descriptor.setter
    def confidence_loss_descriptor(self, arg0: CNNLossDescriptor) -> None:
        ...
    @property
    def max_iou_for_object_absence(self) -> float:
        """
        [0.3]
        """
    @max_iou_for_object_absence.setter
    def max_iou_for_object_absence(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def min_iou_for_object_presence(self) -> float:
        """
        [0.7]
        """
    @min_iou_for_object_presence.setter
    def min_iou_for_object_presence(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def number_of_anchor_boxes(self) -> int:
        ...
    @number_of_anchor_boxes.setter
    def number_of_anchor_boxes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def reduce_across_batch(self) -> bool:
        """
        macOS 11 [False]
        """
    @reduce_across_batch.setter
    def reduce_across_batch(self, arg0: bool) -> None:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        """
        shared by the four part losses
        """
    @reduction_type.setter
    def reduction_type(self, arg0: CNNReductionType) -> None:
        ...
    @property
    def rescore(self) -> bool:
        """
        confidence target = IOU of the prediction (else 1) [True]
        """
    @rescore.setter
    def rescore(self, arg0: bool) -> None:
        ...
    @property
    def scale_class(self) -> float:
        """
        [2.0]
        """
    @scale_class.setter
    def scale_class(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def scale_no_object(self) -> float:
        """
        [5.0]
        """
    @scale_no_object.setter
    def scale_no_object(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def scale_object(self) -> float:
        """
        [100.0]
        """
    @scale_object.setter
    def scale_object(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def scale_wh(self) -> float:
        """
        [10.0]
        """
    @scale_wh.setter
    def scale_wh(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def scale_xy(self) -> float:
        """
        [10.0]
        """
    @scale_xy.setter
    def scale_xy(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def wh_loss_descriptor(self) -> CNNLossDescriptor:
        """
        WHLossDescriptor (applied to the raw W, H)
        """
    @wh_loss_descriptor.setter
    def wh_loss_descriptor(self, arg0: CNNLossDescriptor) -> None:
        ...
    @property
    def xy_loss_descriptor(self) -> CNNLossDescriptor:
        """
        XYLossDescriptor (applied to sigmoid(X), sigmoid(Y))
        """
    @xy_loss_descriptor.setter
    def xy_loss_descriptor(self, arg0: CNNLossDescriptor) -> None:
        ...
class CNNYOLOLoss(CNNKernel):
    """
    MPSCNNYOLOLoss: forward and backward in one encode; the destination receives dL/d(raw predictions), labels.loss_image the loss (the sum of the four internal losses)
    """
    def __init__(self, device: Device | str, loss_descriptor: CNNYOLOLossDescriptor) -> None:
        """
        -[MPSCNNYOLOLoss initWithDevice:lossDescriptor:]
        """
    def encode(self, command_buffer: CommandBuffer, source_image: Image, labels: CNNLossLabels, destination_image: typing.Any = None) -> Image:
        """
        -encodeToCommandBuffer:sourceImage:labels:[destinationImage:]; returns the gradient image
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, labels: typing.Any, destination_images: typing.Any = None) -> list[Image]:
        """
        -encodeBatchToCommandBuffer:sourceImages:labels:[destinationImages:]; returns the gradient images
        """
    @property
    def anchor_boxes(self) -> bytes:
        ...
    @property
    def loss_classes(self) -> CNNLoss:
        """
        MPSCNNYOLOLoss.lossClasses
        """
    @property
    def loss_confidence(self) -> CNNLoss:
        """
        MPSCNNYOLOLoss.lossConfidence
        """
    @property
    def loss_wh(self) -> CNNLoss:
        """
        MPSCNNYOLOLoss.lossWH
        """
    @property
    def loss_xy(self) -> CNNLoss:
        """
        MPSCNNYOLOLoss.lossXY (internal CNNLoss)
        """
    @property
    def max_iou_for_object_absence(self) -> float:
        ...
    @property
    def min_iou_for_object_presence(self) -> float:
        ...
    @property
    def number_of_anchor_boxes(self) -> int:
        ...
    @property
    def number_of_classes(self) -> int:
        """
        K, from classes_loss_descriptor.number_of_classes
        """
    @property
    def reduce_across_batch(self) -> bool:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        ...
    @property
    def rescore(self) -> bool:
        ...
    @property
    def scale_class(self) -> float:
        ...
    @property
    def scale_no_object(self) -> float:
        ...
    @property
    def scale_object(self) -> float:
        ...
    @property
    def scale_wh(self) -> float:
        ...
    @property
    def scale_xy(self) -> float:
        ...
class PoolingKind:
    """
    Which forward pooling kernel a CNNPoolingGradientState comes from
    
    Members:
    
      MAX
    
      AVERAGE
    
      L2_NORM
    
      DILATED_MAX
    """
    AVERAGE: typing.ClassVar[PoolingKind]
    DILATED_MAX: typing.ClassVar[PoolingKind]
    L2_NORM: typing.ClassVar[PoolingKind]
    MAX: typing.ClassVar[PoolingKind]
    __members__: typing.ClassVar[dict[str, PoolingKind]]
    @typing.overload
    def __eq__(self, other: PoolingKind) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: PoolingKind) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNPoolingGradientState(NNGradientState):
    """
    The MPSNNGradientState the pooling kernels write for their gradients (forward window geometry and the average normalization in force)
    """
    @property
    def kind(self) -> PoolingKind:
        ...
    @property
    def zero_pad_size_x(self) -> int:
        ...
    @property
    def zero_pad_size_y(self) -> int:
        ...
class CNNPooling(CNNKernel):
    """
    MPSCNNPooling: the pooling base class. Window of destination pixel clip_rect.origin + (x, y): center offset + stride * (x, y), taps at center - (E >> 1) + dilation * t with E = (k - 1) * dilation + 1.
    """
    @property
    def kind(self) -> PoolingKind:
        ...
class CNNPoolingMax(CNNPooling):
    """
    MPSCNNPoolingMax: the maximum over the window (first maximum in scan order on ties). Off-image taps read 0 under ImageEdgeMode.ZERO and the nearest pixel under CLAMP.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingMax initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
class CNNPoolingAverage(CNNPooling):
    """
    MPSCNNPoolingAverage: the sum of the in-image taps over N. ZERO edge mode: N = kernel_width * kernel_height. CLAMP (or the padding method's EXCLUDE_EDGES bit): N = the taps inside the image widened by zero_pad_size_x/y on each side; a window with none gives 0.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingAverage initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
    @property
    def zero_pad_size_x(self) -> int:
        """
        MPSCNNPoolingAverage.zeroPadSizeX
        """
    @zero_pad_size_x.setter
    def zero_pad_size_x(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def zero_pad_size_y(self) -> int:
        """
        MPSCNNPoolingAverage.zeroPadSizeY
        """
    @zero_pad_size_y.setter
    def zero_pad_size_y(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class CNNPoolingL2Norm(CNNPooling):
    """
    MPSCNNPoolingL2Norm: sqrt of the sum of the squares over the window.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingL2Norm initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
class CNNDilatedPoolingMax(CNNPooling):
    """
    MPSCNNDilatedPoolingMax: the maximum over dilated taps.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, dilation_rate_x: typing.SupportsInt | typing.SupportsIndex = 1, dilation_rate_y: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNDilatedPoolingMax initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:strideInPixelsX:strideInPixelsY:]
        """
class CNNPoolingGradient(CNNGradientKernel):
    """
    MPSCNNPoolingGradient: the pooling gradient base class. primary = dL/dY, secondary = the forward source X (average pooling reads only its size). destination_image_descriptor copies the forward geometry from the state: primary_offset = forward clip origin, source_size = forward clip size, secondary_offset = forward offset, clip_rect = the whole dX. Pixels no window reaches get 0.
    """
    @property
    def dilation_rate_x(self) -> int:
        ...
    @property
    def dilation_rate_y(self) -> int:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def kind(self) -> PoolingKind:
        ...
    @property
    def source_size(self) -> tuple:
        """
        MPSCNNPoolingGradient.sourceSize (width, height, depth): the G pixels from primary_offset that contribute
        """
    @source_size.setter
    def source_size(self, arg1: typing.Any) -> None:
        ...
    @property
    def stride_in_pixels_x(self) -> int:
        ...
    @property
    def stride_in_pixels_y(self) -> int:
        ...
class CNNPoolingMaxGradient(CNNPoolingGradient):
    """
    MPSCNNPoolingMaxGradient: G goes to the argmax tap of each window, recomputed from X.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
class CNNPoolingAverageGradient(CNNPoolingGradient):
    """
    MPSCNNPoolingAverageGradient: G / N to every in-image tap of each window.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingAverageGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
    @property
    def zero_pad_size_x(self) -> int:
        """
        MPSCNNPoolingAverageGradient.zeroPadSizeX (copied from the state by destination_image_descriptor)
        """
    @zero_pad_size_x.setter
    def zero_pad_size_x(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def zero_pad_size_y(self) -> int:
        """
        MPSCNNPoolingAverageGradient.zeroPadSizeY
        """
    @zero_pad_size_y.setter
    def zero_pad_size_y(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class CNNPoolingL2NormGradient(CNNPoolingGradient):
    """
    MPSCNNPoolingL2NormGradient: dX = sum over windows of G * X / out (0 where out = 0), out recomputed from X.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNPoolingL2NormGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]
        """
class CNNDilatedPoolingMaxGradient(CNNPoolingGradient):
    """
    MPSCNNDilatedPoolingMaxGradient: the max gradient over dilated taps.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, dilation_rate_x: typing.SupportsInt | typing.SupportsIndex = 1, dilation_rate_y: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex = 1, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        -[MPSCNNDilatedPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:strideInPixelsX:strideInPixelsY:]
        """
class UpsamplingCoordinateMode:
    """
    How CNNUpsamplingBilinear maps output to input coordinates when align_corners is False (mpsgrad option)
    
    Members:
    
      HALF_PIXEL : src = (dst + 0.5) / scale - 0.5, clamped at 0 (PyTorch align_corners=False); the default
    
      ASYMMETRIC : src = dst / scale (TensorFlow 1 legacy)
    """
    ASYMMETRIC: typing.ClassVar[UpsamplingCoordinateMode]
    HALF_PIXEL: typing.ClassVar[UpsamplingCoordinateMode]
    __members__: typing.ClassVar[dict[str, UpsamplingCoordinateMode]]
    @typing.overload
    def __eq__(self, other: UpsamplingCoordinateMode) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: UpsamplingCoordinateMode) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNUpsamplingGradientState(NNGradientState):
    """
    The MPSNNGradientState the upsampling kernels write for their gradients (scale factors, corner alignment, coordinate mode and the input extent)
    """
    @property
    def align_corners(self) -> bool:
        ...
    @property
    def coordinate_mode(self) -> UpsamplingCoordinateMode:
        ...
    @property
    def is_bilinear(self) -> bool:
        ...
class CNNUpsampling(CNNKernel):
    """
    MPSCNNUpsampling: the upsampling base class. The input is the source from `offset` (default (0, 0)) to its edges; the returning encode forms make a destination of the source's size times the scale factors.
    """
    @property
    def align_corners(self) -> bool:
        ...
    @property
    def scale_factor_x(self) -> float:
        ...
    @property
    def scale_factor_y(self) -> float:
        ...
class CNNUpsamplingNearest(CNNUpsampling):
    """
    MPSCNNUpsamplingNearest: Y[y][x] = X[y // sy][x // sx].
    """
    def __init__(self, device: Device | str, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        -[MPSCNNUpsamplingNearest initWithDevice:integerScaleFactorX:integerScaleFactorY:]
        """
class CNNUpsamplingBilinear(CNNUpsampling):
    """
    MPSCNNUpsamplingBilinear: bilinear interpolation. align_corners=True maps the corner pixel centers onto each other (src = dst * (W_in - 1) / (W_out - 1)); otherwise coordinate_mode decides (HALF_PIXEL default).
    """
    def __init__(self, device: Device | str, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex, align_corners: bool = False) -> None:
        """
        -[MPSCNNUpsamplingBilinear initWithDevice:integerScaleFactorX:integerScaleFactorY:alignCorners:]
        """
    @property
    def coordinate_mode(self) -> UpsamplingCoordinateMode:
        """
        mpsgrad option: the output-to-input coordinate rule when align_corners is False
        """
    @coordinate_mode.setter
    def coordinate_mode(self, arg0: UpsamplingCoordinateMode) -> None:
        ...
class CNNUpsamplingGradient(CNNGradientKernel):
    """
    MPSCNNUpsamplingGradient: the upsampling gradient base class. primary = dL/dY; the secondary (the forward source) only sizes the result. Corner alignment and coordinate mode come from the gradient state.
    """
    @property
    def scale_factor_x(self) -> float:
        ...
    @property
    def scale_factor_y(self) -> float:
        ...
class CNNUpsamplingNearestGradient(CNNUpsamplingGradient):
    """
    MPSCNNUpsamplingNearestGradient: dX = the sum of each sy x sx block of G.
    """
    def __init__(self, device: Device | str, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        -[MPSCNNUpsamplingNearestGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]
        """
class CNNUpsamplingBilinearGradient(CNNUpsamplingGradient):
    """
    MPSCNNUpsamplingBilinearGradient: each G pixel goes back to its four taps with the forward weights.
    """
    def __init__(self, device: Device | str, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        -[MPSCNNUpsamplingBilinearGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]
        """
class CNNDropoutGradientState(NNGradientState):
    """
    MPSCNNDropoutGradientState: what CNNDropoutGradient needs to regenerate the forward mask
    """
    def mask_data(self) -> numpy.typing.NDArray[numpy.uint8]:
        """
        -[MPSCNNDropoutGradientState maskData]: the mask, 1 = kept, as uint8 (images, height, width, channels) of the mask grid (extent 1 along broadcast axes); empty before the forward pass has encoded
        """
    @property
    def keep_probability(self) -> float:
        ...
    @property
    def seed(self) -> int:
        ...
class CNNDropout(CNNKernel):
    """
    MPSCNNDropout: Y = X * m / keep_probability, m in {0, 1} with P(m = 1) = keep_probability, drawn from Philox4x32-10 keyed by seed (the same mask on every device). Each encode draws a fresh mask.
    """
    def __init__(self, device: Device | str, keep_probability: typing.SupportsFloat | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex = 0, mask_stride_in_pixels: typing.Any = (1, 1, 1)) -> None:
        """
        -[MPSCNNDropout initWithDevice:keepProbability:seed:maskStrideInPixels:]
        """
    @property
    def encode_count(self) -> int:
        """
        mpsgrad: forward encodes so far (the Philox stream of the next encode)
        """
    @property
    def keep_probability(self) -> float:
        ...
    @property
    def mask_stride_in_pixels(self) -> tuple:
        ...
    @property
    def seed(self) -> int:
        ...
class CNNDropoutGradient(CNNGradientKernel):
    """
    MPSCNNDropoutGradient: dX = G * m / keep_probability with the mask of the forward pass that made gradient_state. source_image is not read.
    """
    def __init__(self, device: Device | str, keep_probability: typing.SupportsFloat | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex = 0, mask_stride_in_pixels: typing.Any = (1, 1, 1)) -> None:
        """
        -[MPSCNNDropoutGradient initWithDevice:keepProbability:seed:maskStrideInPixels:]
        """
    @property
    def keep_probability(self) -> float:
        ...
    @property
    def mask_stride_in_pixels(self) -> tuple:
        ...
    @property
    def seed(self) -> int:
        ...
class ImageCoordinate:
    """
    MPSImageCoordinate: a pixel position and feature channel
    """
    __hash__: typing.ClassVar[None] = None
    def __eq__(self, arg0: typing.Any) -> bool:
        ...
    def __init__(self, x: typing.Any = 0, y: typing.Any = 0, channel: typing.Any = 0) -> None:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def channel(self) -> int:
        ...
    @property
    def x(self) -> int:
        ...
    @property
    def y(self) -> int:
        ...
class NNReshapeGradientState(NNGradientState):
    """
    The MPSNNGradientState NNReshape writes for NNReshapeGradient (both shapes)
    """
class NNPadGradientState(NNGradientState):
    """
    The MPSNNGradientState NNPad writes for NNPadGradient (the source index every written element copied)
    """
class NNReshape(CNNKernel):
    """
    MPSNNReshape: copies the whole source (its channels after source_feature_channel_offset / max count) into a destination of another shape with the same number of elements, in HWC order (docs/reshape_pad.md). offset.x/y must be 0 and clip_rect must not cut the destination.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSNNReshape initWithDevice:]
        """
    def encode(self, command_buffer: typing.Any, source_image: typing.Any, destination_state: typing.Any = None, destination_image: typing.Any = None, *, destination_state_is_temporary: typing.Any = None, reshaped_width: typing.Any = None, reshaped_height: typing.Any = None, reshaped_feature_channels: typing.Any = None) -> typing.Any:
        """
        MPSCNNKernel's encode forms (see CNNKernel.encode; the returning forms keep the source's shape), and with reshaped_width/height/feature_channels the macOS 11 forms -encodeToCommandBuffer:sourceImage:[destinationState:destinationStateIsTemporary:]reshapedWidth:reshapedHeight:reshapedFeatureChannels: (returns the image, or (image, state) with destination_state_is_temporary).
        """
    def encode_batch(self, command_buffer: typing.Any, source_images: typing.Any, destination_states: typing.Any = None, destination_images: typing.Any = None, *, destination_state_is_temporary: typing.Any = None, reshaped_width: typing.Any = None, reshaped_height: typing.Any = None, reshaped_feature_channels: typing.Any = None) -> typing.Any:
        """
        MPSCNNKernel's batch encode forms, and with reshaped_width/height/feature_channels -encodeBatchToCommandBuffer:sourceImages:[destinationStates:destinationStateIsTemporary:]reshapedWidth:reshapedHeight:reshapedFeatureChannels: (macOS 11).
        """
class NNReshapeGradient(CNNGradientKernel):
    """
    MPSNNReshapeGradient: reshapes the incoming gradient back into the forward source's shape. source_gradient = dL/dY, source_image = the forward source X, gradient_state = NNReshape's result state.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSNNReshapeGradient initWithDevice:]
        """
class NNPad(CNNKernel):
    """
    MPSNNPad: copies the source into the destination, filling outside the source by edge_mode: ZERO, CONSTANT (fill_value or the per-channel fill_value_array), CLAMP, MIRROR (np.pad 'reflect'), MIRROR_WITH_EDGE (np.pad 'symmetric'); also pads feature channels. Destination pixel clip_rect.origin + p reads source pixel offset + p; the returning encode forms size the destination by padding_size_before/after (docs/reshape_pad.md).
    """
    def __init__(self, device: Device | str, padding_size_before: typing.Any = None, padding_size_after: typing.Any = None, fill_value_array: typing.Any = None) -> None:
        """
        -[MPSNNPad initWithDevice:[paddingSizeBefore:paddingSizeAfter:[fillValueArray:]]]: sizes as ImageCoordinate or (x, y, channel); fill_value_array holds one value per channel written (CONSTANT).
        """
    @property
    def fill_value(self) -> float:
        """
        MPSNNPad.fillValue (edge mode CONSTANT; ignored when fill_value_array was given)
        """
    @fill_value.setter
    def fill_value(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def fill_value_array(self) -> list[float]:
        """
        The initializer's per-channel fill values (empty: fill_value is used)
        """
    @property
    def padding_size_after(self) -> ImageCoordinate:
        """
        MPSNNPad.paddingSizeAfter
        """
    @padding_size_after.setter
    def padding_size_after(self, arg1: typing.Any) -> None:
        ...
    @property
    def padding_size_before(self) -> ImageCoordinate:
        """
        MPSNNPad.paddingSizeBefore (x, y: the returning encode forms; channel: always)
        """
    @padding_size_before.setter
    def padding_size_before(self, arg1: typing.Any) -> None:
        ...
class NNPadGradient(CNNGradientKernel):
    """
    MPSNNPadGradient: dX = the sum of G over every element the forward NNPad copied from each source element (a slice of G for ZERO / CONSTANT). Every element of dX is written; those the forward pass did not read get 0.
    """
    def __init__(self, device: Device | str) -> None:
        """
        -[MPSNNPadGradient initWithDevice:]
        """
class NNGramMatrixCalculationGradientState(NNGradientState):
    """
    The MPSNNGradientState NNGramMatrixCalculation writes for NNGramMatrixCalculationGradient
    """
class NNReductionSpatialMeanGradientState(NNGradientState):
    """
    The MPSNNGradientState NNReductionSpatialMean writes for NNReductionSpatialMeanGradient (the region averaged)
    """
class NNGramMatrixCalculation(CNNKernel):
    """
    MPSNNGramMatrixCalculation: per image, G[f][c] = alpha * sum over pixels of X[f] * X[c] for the N source channels read, written as an N-wide, 1-high image of N feature channels (pixel x = f holds row f). offset.x/y must be 0 and clip_rect must cover the N x 1 result (docs/gram_matrix_spatial_mean.md).
    """
    def __init__(self, device: Device | str, alpha: typing.Any = None) -> None:
        """
        -[MPSNNGramMatrixCalculation initWithDevice:] (alpha 1) / -initWithDevice:alpha:
        """
    @property
    def alpha(self) -> float:
        """
        MPSNNGramMatrixCalculation.alpha
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
class NNGramMatrixCalculationGradient(CNNGradientKernel):
    """
    MPSNNGramMatrixCalculationGradient: dX[p][f] = alpha * sum over c of X[p][c] * (Gr[f][c] + Gr[c][f]). source_gradient = Gr (N x 1 x N), source_image = the forward source X, gradient_state = the forward's state.
    """
    def __init__(self, device: Device | str, alpha: typing.Any = None) -> None:
        """
        -[MPSNNGramMatrixCalculationGradient initWithDevice:] (alpha 1) / -initWithDevice:alpha:
        """
    @property
    def alpha(self) -> float:
        """
        MPSNNGramMatrixCalculationGradient.alpha
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
class NNReductionSpatialMean(CNNKernel):
    """
    The spatial mean of MPSNNReductionSpatialMeanNode (mpsgrad name; Apple publishes no kernel class): one pixel per image holding each feature channel's mean over clip_rect_source (default: the whole source), written at clip_rect.origin; the returning encode forms make a 1 x 1 destination.
    """
    def __init__(self, device: Device | str) -> None:
        """
        Kernel of MPSNNReductionSpatialMeanNode (initWithDevice:)
        """
    @property
    def clip_rect_source(self) -> Region:
        """
        MPSNNUnaryReductionNode.clipRectSource: the source region averaged (intersected with the source)
        """
    @clip_rect_source.setter
    def clip_rect_source(self, arg1: typing.Any) -> None:
        ...
class NNReductionSpatialMeanGradient(CNNGradientKernel):
    """
    The gradient of the spatial mean (MPSNNReductionSpatialMeanGradientNode's kernel; mpsgrad name): dX = G / (w * h) over the forward's source region, 0 elsewhere.
    """
    def __init__(self, device: Device | str) -> None:
        """
        Kernel of MPSNNReductionSpatialMeanGradientNode (initWithDevice:)
        """
class LocalNormalizationKind:
    """
    Which forward kernel a CNNLocalNormalizationGradientState comes from
    
    Members:
    
      CROSS_CHANNEL
    
      SPATIAL
    
      LOCAL_CONTRAST
    """
    CROSS_CHANNEL: typing.ClassVar[LocalNormalizationKind]
    LOCAL_CONTRAST: typing.ClassVar[LocalNormalizationKind]
    SPATIAL: typing.ClassVar[LocalNormalizationKind]
    __members__: typing.ClassVar[dict[str, LocalNormalizationKind]]
    @typing.overload
    def __eq__(self, other: LocalNormalizationKind) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: LocalNormalizationKind) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNLocalNormalizationGradientState(NNGradientState):
    """
    The MPSNNGradientState the cross-channel, spatial and local contrast normalization kernels write for their gradients: the forward geometry, window and parameters
    """
    @property
    def alpha(self) -> float:
        ...
    @property
    def beta(self) -> float:
        ...
    @property
    def delta(self) -> float:
        ...
    @property
    def kind(self) -> LocalNormalizationKind:
        ...
class CNNCrossChannelNormalization(CNNKernel):
    """
    MPSCNNCrossChannelNormalization (LRN across feature channels): Y(k) = X(k) * L(k)^-beta with L(k) = delta + alpha / kernel_size * sum of X(q)^2 over q in [k - (kernel_size >> 1), k + ((kernel_size - 1) >> 1)] cut to the processed channels; PyTorch's local_response_norm(size=kernel_size, alpha=alpha, beta=beta, k=delta).
    """
    def __init__(self, device: Device | str, kernel_size: typing.SupportsInt = 5) -> None:
        """
        -[MPSCNNCrossChannelNormalization initWithDevice:kernelSize:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNCrossChannelNormalization.alpha (default 1.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNCrossChannelNormalization.beta (default 5.0)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNCrossChannelNormalization.delta (default 1.0; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_size(self) -> int:
        """
        kernelSize: channels in the window (default 5)
        """
class CNNSpatialNormalization(CNNKernel):
    """
    MPSCNNSpatialNormalization: Y = X * (delta + alpha / N * sum of X^2 over the kernel_width x kernel_height window)^-beta, N = kernel_width * kernel_height, per channel. The window of destination pixel clip_rect.origin + p is centered at source pixel offset + p, taps from center - (kernel >> 1); off-image taps read 0 (ImageEdgeMode.ZERO only). kernel_width must equal kernel_height.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt, kernel_height: typing.SupportsInt) -> None:
        """
        -[MPSCNNSpatialNormalization initWithDevice:kernelWidth:kernelHeight:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNSpatialNormalization.alpha (default 1.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNSpatialNormalization.beta (default 5.0)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNSpatialNormalization.delta (default 1.0; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNLocalContrastNormalization(CNNKernel):
    """
    MPSCNNLocalContrastNormalization: Y = pm + ps * (X - p0 * M) / (delta + alpha * V)^beta with M and V the mean and (population) variance of the window, per channel; windows as CNNSpatialNormalization. kernel_width must equal kernel_height.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt, kernel_height: typing.SupportsInt) -> None:
        """
        -[MPSCNNLocalContrastNormalization initWithDevice:kernelWidth:kernelHeight:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNLocalContrastNormalization.alpha (default 0.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNLocalContrastNormalization.beta (default 0.5)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNLocalContrastNormalization.delta (default 1/1024; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def p0(self) -> float:
        """
        MPSCNNLocalContrastNormalization.p0 (default 1.0): weight of the mean
        """
    @p0.setter
    def p0(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def pm(self) -> float:
        """
        MPSCNNLocalContrastNormalization.pm (default 0.0): added to the result
        """
    @pm.setter
    def pm(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def ps(self) -> float:
        """
        MPSCNNLocalContrastNormalization.ps (default 1.0): scale of the result
        """
    @ps.setter
    def ps(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNCrossChannelNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNCrossChannelNormalizationGradient: primary = dL/dY, secondary = the forward INPUT X; every parameter must match the forward kernel's. destination_image_descriptor copies the forward geometry from the state: primary_offset = forward clip origin, secondary_offset = forward offset (window centers), clip_rect = the whole dX (X's coordinates). The exact derivatives are in docs/normalization.md.
    """
    def __init__(self, device: Device | str, kernel_size: typing.SupportsInt = 5) -> None:
        """
        -[MPSCNNCrossChannelNormalizationGradient initWithDevice:kernelSize:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNCrossChannelNormalizationGradient.alpha (default 1.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNCrossChannelNormalizationGradient.beta (default 5.0)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNCrossChannelNormalizationGradient.delta (default 1.0; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_size(self) -> int:
        """
        kernelSize: channels in the window (default 5)
        """
class CNNSpatialNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNSpatialNormalizationGradient: primary = dL/dY, secondary = the forward INPUT X; every parameter must match the forward kernel's. destination_image_descriptor copies the forward geometry from the state: primary_offset = forward clip origin, secondary_offset = forward offset (window centers), clip_rect = the whole dX (X's coordinates). The exact derivatives are in docs/normalization.md.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt, kernel_height: typing.SupportsInt) -> None:
        """
        -[MPSCNNSpatialNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNSpatialNormalizationGradient.alpha (default 1.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNSpatialNormalizationGradient.beta (default 5.0)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNSpatialNormalizationGradient.delta (default 1.0; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
class CNNLocalContrastNormalizationGradient(CNNGradientKernel):
    """
    MPSCNNLocalContrastNormalizationGradient: primary = dL/dY, secondary = the forward INPUT X; every parameter must match the forward kernel's. destination_image_descriptor copies the forward geometry from the state: primary_offset = forward clip origin, secondary_offset = forward offset (window centers), clip_rect = the whole dX (X's coordinates). The exact derivatives are in docs/normalization.md.
    """
    def __init__(self, device: Device | str, kernel_width: typing.SupportsInt, kernel_height: typing.SupportsInt) -> None:
        """
        -[MPSCNNLocalContrastNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]
        """
    @property
    def alpha(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.alpha (default 0.0; must be >= 0)
        """
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.beta (default 0.5)
        """
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.delta (default 1/1024; must be > 0)
        """
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def p0(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.p0 (default 1.0): weight of the mean
        """
    @p0.setter
    def p0(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def pm(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.pm (default 0.0): added to the result
        """
    @pm.setter
    def pm(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def ps(self) -> float:
        """
        MPSCNNLocalContrastNormalizationGradient.ps (default 1.0): scale of the result
        """
    @ps.setter
    def ps(self, arg1: typing.SupportsFloat) -> None:
        ...
class NNFilterNode:
    """
    MPSNNFilterNode (abstract)
    """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def gradient_filter_with_source(self, source_gradient: NNImageNode) -> NNGradientFilterNode:
        """
        -gradientFilterWithSource:
        """
    def gradient_filter_with_sources(self, source_gradients: collections.abc.Sequence[NNImageNode]) -> NNGradientFilterNode:
        """
        -gradientFilterWithSources:
        """
    def gradient_filters_with_source(self, source_gradient: NNImageNode) -> list[NNGradientFilterNode]:
        """
        -gradientFiltersWithSource:
        """
    def gradient_filters_with_sources(self, source_gradients: collections.abc.Sequence[NNImageNode]) -> list[NNGradientFilterNode]:
        """
        -gradientFiltersWithSources:
        """
    def training_graph(self, source_gradient: NNImageNode = None, node_handler: typing.Any = None) -> list[NNFilterNode]:
        """
        -trainingGraphWithSourceGradient:nodeHandler: — returns the terminal gradient nodes
        """
    @property
    def label(self) -> str:
        """
        MPSNNFilterNode.label
        """
    @label.setter
    def label(self, arg0: str) -> None:
        ...
    @property
    def padding_policy(self) -> NNPadding:
        """
        MPSNNFilterNode.paddingPolicy
        """
    @padding_policy.setter
    def padding_policy(self, arg0: NNPadding) -> None:
        ...
    @property
    def result_image(self) -> NNImageNode:
        """
        MPSNNFilterNode.resultImage
        """
    @property
    def result_state(self) -> NNStateNode:
        """
        MPSNNFilterNode.resultState
        """
    @property
    def result_states(self) -> list[NNStateNode]:
        """
        MPSNNFilterNode.resultStates
        """
    @property
    def source_images(self) -> list[NNImageNode]:
        ...
    @property
    def source_states(self) -> list[NNStateNode]:
        ...
class NNGradientFilterNode(NNFilterNode):
    """
    MPSNNGradientFilterNode (abstract)
    """
    @property
    def forward_node(self) -> NNFilterNode:
        ...
class NNTrainingStyle:
    """
    MPSNNTrainingStyle
    
    Members:
    
      UPDATE_DEVICE_NONE
    
      UPDATE_DEVICE_CPU
    
      UPDATE_DEVICE_GPU
    """
    UPDATE_DEVICE_CPU: typing.ClassVar[NNTrainingStyle]
    UPDATE_DEVICE_GPU: typing.ClassVar[NNTrainingStyle]
    UPDATE_DEVICE_NONE: typing.ClassVar[NNTrainingStyle]
    __members__: typing.ClassVar[dict[str, NNTrainingStyle]]
    @typing.overload
    def __eq__(self, other: NNTrainingStyle) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: NNTrainingStyle) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class CNNBatchNormalizationFlags:
    """
    MPSCNNBatchNormalizationFlags
    
    Members:
    
      DEFAULT
    
      CALCULATE_STATISTICS_ALWAYS
    
      CALCULATE_STATISTICS_NEVER
    """
    CALCULATE_STATISTICS_ALWAYS: typing.ClassVar[CNNBatchNormalizationFlags]
    CALCULATE_STATISTICS_NEVER: typing.ClassVar[CNNBatchNormalizationFlags]
    DEFAULT: typing.ClassVar[CNNBatchNormalizationFlags]
    __members__: typing.ClassVar[dict[str, CNNBatchNormalizationFlags]]
    @typing.overload
    def __eq__(self, other: CNNBatchNormalizationFlags) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: CNNBatchNormalizationFlags) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class NNImageNode:
    """
    MPSNNImageNode
    """
    synchronize_resource: bool
    @staticmethod
    def exported_node_with_handle(handle: typing.Any = None) -> NNImageNode:
        """
        +exportedNodeWithHandle: (export_from_graph = True)
        """
    def __init__(self, handle: typing.Any = None) -> None:
        """
        -initWithHandle: / +nodeWithHandle: (a graph input)
        """
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def export_from_graph(self) -> bool:
        """
        MPSNNImageNode.exportFromGraph
        """
    @export_from_graph.setter
    def export_from_graph(self, arg0: bool) -> None:
        ...
    @property
    def format(self) -> ImageFeatureChannelFormat:
        """
        MPSNNImageNode.format
        """
    @format.setter
    def format(self, arg1: ImageFeatureChannelFormat) -> None:
        ...
    @property
    def handle(self) -> typing.Any:
        """
        MPSNNImageNode.handle
        """
    @handle.setter
    def handle(self, arg1: typing.Any) -> None:
        ...
    @property
    def image_allocator(self) -> ImageAllocator:
        """
        MPSNNImageNode.imageAllocator
        """
    @image_allocator.setter
    def image_allocator(self, arg0: ImageAllocator) -> None:
        ...
    @property
    def producer(self) -> NNFilterNode:
        """
        The filter node producing it (None: an input)
        """
    @property
    def stop_gradient(self) -> bool:
        """
        MPSNNImageNode.stopGradient
        """
    @stop_gradient.setter
    def stop_gradient(self, arg0: bool) -> None:
        ...
class NNStateNode:
    """
    MPSNNStateNode (from result_state)
    """
    export_from_graph: bool
    handle: typing.Any
    synchronize_resource: bool
    def __reduce__(self) -> typing.Any:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    @property
    def producer(self) -> NNFilterNode:
        ...
class NNGradientStateNode(NNStateNode):
    """
    MPSNNGradientStateNode
    """
class CNNConvolutionGradientStateNode(NNGradientStateNode):
    """
    MPSCNNConvolutionGradientStateNode
    """
class NNBinaryGradientStateNode(NNStateNode):
    """
    MPSNNBinaryGradientStateNode
    """
class NNArithmeticGradientStateNode(NNBinaryGradientStateNode):
    """
    MPSNNArithmeticGradientStateNode
    """
class NNLabelsNode(NNStateNode):
    """
    MPSNNLabelsNode
    """
    def __init__(self, handle: typing.Any = None) -> None:
        ...
class CNNConvolutionNode(NNFilterNode):
    """
    MPSCNNConvolutionNode
    """
    accumulator_precision: NNConvolutionAccumulatorPrecisionOption
    def __init__(self, source: NNImageNode, weights: typing.Any) -> None:
        """
        +nodeWithSource:weights:
        """
    @property
    def convolution_gradient_state(self) -> NNStateNode:
        ...
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNConvolutionGradientNode(NNGradientFilterNode):
    """
    MPSCNNConvolutionGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, convolution_gradient_state: NNStateNode, weights: typing.Any = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:convolutionGradientState:weights: (None: the forward's)
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNConvolutionTransposeGradientStateNode(CNNConvolutionGradientStateNode):
    """
    MPSCNNConvolutionTransposeGradientStateNode
    """
class CNNConvolutionTransposeNode(NNFilterNode):
    """
    MPSCNNConvolutionTransposeNode
    """
    accumulator_precision: NNConvolutionAccumulatorPrecisionOption
    def __init__(self, source: NNImageNode, convolution_gradient_state: NNStateNode, weights: typing.Any) -> None:
        """
        +nodeWithSource:convolutionGradientState:weights: (convolution_gradient_state: None, or a CNNConvolutionNode's result state, which sizes the result like that convolution's source)
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNConvolutionTransposeGradientNode(CNNConvolutionGradientNode):
    """
    MPSCNNConvolutionTransposeGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, convolution_transpose_gradient_state: NNStateNode, weights: typing.Any = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:convolutionTransposeGradientState:weights: (None: the forward's)
        """
class CNNFullyConnectedNode(CNNConvolutionNode):
    """
    MPSCNNFullyConnectedNode
    """
    def __init__(self, source: NNImageNode, weights: typing.Any) -> None:
        """
        +nodeWithSource:weights:
        """
class CNNFullyConnectedGradientNode(CNNConvolutionGradientNode):
    """
    MPSCNNFullyConnectedGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, convolution_gradient_state: NNStateNode, weights: typing.Any = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:convolutionGradientState:weights: (None: the forward's)
        """
class CNNBatchNormalizationNode(NNFilterNode):
    """
    MPSCNNBatchNormalizationNode
    """
    flags: CNNBatchNormalizationFlags
    def __init__(self, source: NNImageNode, data_source: typing.Any) -> None:
        """
        +nodeWithSource:dataSource:
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNBatchNormalizationGradientNode(NNGradientFilterNode):
    """
    MPSCNNBatchNormalizationGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        ...
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNNeuronNode(NNFilterNode):
    """
    MPSCNNNeuronNode
    """
    def __init__(self, source: NNImageNode, descriptor: NNNeuronDescriptor) -> None:
        """
        +nodeWithSource:descriptor:
        """
    @property
    def a(self) -> float:
        ...
    @property
    def b(self) -> float:
        ...
    @property
    def c(self) -> float:
        ...
    @property
    def descriptor(self) -> NNNeuronDescriptor:
        ...
class CNNNeuronAbsoluteNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronELUNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronReLUNNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 6.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronLinearNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronReLUNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronSigmoidNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronHardSigmoidNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.20000000298023224, b: typing.SupportsFloat | typing.SupportsIndex = 0.5, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronSoftPlusNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 1.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronSoftSignNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronTanHNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 1.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronPowerNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> None:
        ...
class CNNNeuronExponentialNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = -1.0) -> None:
        ...
class CNNNeuronLogarithmNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 1.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = -1.0) -> None:
        ...
class CNNNeuronGeLUNode(CNNNeuronNode):
    """
    MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults
    """
    def __init__(self, source: NNImageNode, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 0.0, c: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class CNNNeuronPReLUNode(CNNNeuronNode):
    """
    MPSCNNNeuronPReLUNode: x >= 0 ? x : a[channel] * x
    """
    def __init__(self, source: NNImageNode, a_data: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        """
        +nodeWithSource:aData: (one slope per feature channel)
        """
    @property
    def a_data(self) -> list[float]:
        ...
class CNNNeuronGradientNode(NNGradientFilterNode):
    """
    MPSCNNNeuronGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, descriptor: NNNeuronDescriptor) -> None:
        ...
class CNNPoolingNode(NNFilterNode):
    """
    MPSCNNPoolingNode
    """
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def stride_in_pixels_x(self) -> int:
        ...
    @property
    def stride_in_pixels_y(self) -> int:
        ...
class CNNPoolingGradientNode(NNGradientFilterNode):
    """
    MPSCNNPoolingGradientNode (kind: PoolingKind)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kind: PoolingKind, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex, padding_policy: NNPadding = None, dilation_rate_x: typing.SupportsInt | typing.SupportsIndex = 1, dilation_rate_y: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def kind(self) -> PoolingKind:
        ...
    @property
    def stride_in_pixels_x(self) -> int:
        ...
    @property
    def stride_in_pixels_y(self) -> int:
        ...
class CNNPoolingMaxGradientNode(CNNPoolingGradientNode):
    """
    MPSCNNPooling*GradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex, padding_policy: NNPadding = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:paddingPolicy:
        """
class CNNPoolingAverageGradientNode(CNNPoolingGradientNode):
    """
    MPSCNNPooling*GradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex, padding_policy: NNPadding = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:paddingPolicy:
        """
class CNNPoolingL2NormGradientNode(CNNPoolingGradientNode):
    """
    MPSCNNPooling*GradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex, padding_policy: NNPadding = None) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:paddingPolicy:
        """
class CNNDilatedPoolingMaxGradientNode(CNNPoolingGradientNode):
    """
    MPSCNNDilatedPoolingMaxGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_x: typing.SupportsInt | typing.SupportsIndex, stride_in_pixels_y: typing.SupportsInt | typing.SupportsIndex, dilation_rate_x: typing.SupportsInt | typing.SupportsIndex, dilation_rate_y: typing.SupportsInt | typing.SupportsIndex, padding_policy: NNPadding = None) -> None:
        """
        ...strideInPixelsY:dilationRateX:dilationRateY:paddingPolicy:
        """
    @property
    def dilation_rate_x(self) -> int:
        ...
    @property
    def dilation_rate_y(self) -> int:
        ...
class CNNSoftMaxNode(NNFilterNode):
    """
    MPSCNNSoftMaxNode
    """
    def __init__(self, source: NNImageNode) -> None:
        ...
class CNNLogSoftMaxNode(CNNSoftMaxNode):
    """
    MPSCNNLogSoftMaxNode
    """
    def __init__(self, source: NNImageNode) -> None:
        """
        +nodeWithSource:
        """
class CNNSoftMaxGradientNode(NNGradientFilterNode):
    """
    MPSCNNSoftMaxGradientNode (source_image: the forward result)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        ...
class CNNLogSoftMaxGradientNode(NNGradientFilterNode):
    """
    MPSCNNLogSoftMaxGradientNode (source_image: the forward result)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        ...
class CNNUpsamplingNode(NNFilterNode):
    """
    MPSCNNUpsampling*Node
    """
class CNNUpsamplingGradientNode(NNGradientFilterNode):
    """
    the upsampling gradient nodes' base (scale factors)
    """
    @property
    def scale_factor_x(self) -> int:
        ...
    @property
    def scale_factor_y(self) -> int:
        ...
class CNNUpsamplingNearestGradientNode(CNNUpsamplingGradientNode):
    """
    MPSCNNUpsampling*GradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, scale_factor_x: typing.SupportsInt | typing.SupportsIndex, scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:
        """
class CNNUpsamplingBilinearGradientNode(CNNUpsamplingGradientNode):
    """
    MPSCNNUpsampling*GradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, scale_factor_x: typing.SupportsInt | typing.SupportsIndex, scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:
        """
class CNNDropoutNode(NNFilterNode):
    """
    MPSCNNDropoutNode
    """
    def __init__(self, source: NNImageNode, keep_probability: typing.SupportsFloat | typing.SupportsIndex = 0.5, seed: typing.SupportsInt | typing.SupportsIndex = 0, mask_stride_in_pixels: tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex] = (1, 1, 1)) -> None:
        ...
class CNNDropoutGradientNode(NNGradientFilterNode):
    """
    MPSCNNDropoutGradientNode
    """
class NNBinaryArithmeticNode(NNFilterNode):
    """
    MPSNNBinaryArithmeticNode
    """
    @property
    def bias(self) -> float:
        ...
    @bias.setter
    def bias(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def maximum_value(self) -> float:
        ...
    @maximum_value.setter
    def maximum_value(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def minimum_value(self) -> float:
        ...
    @minimum_value.setter
    def minimum_value(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def primary_scale(self) -> float:
        ...
    @primary_scale.setter
    def primary_scale(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def secondary_scale(self) -> float:
        ...
    @secondary_scale.setter
    def secondary_scale(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class NNArithmeticGradientNode(NNGradientFilterNode):
    """
    MPSNNArithmeticGradientNode (source_image: the other forward operand)
    """
    @property
    def is_secondary_source_filter(self) -> bool:
        ...
class NNAdditionGradientNode(NNArithmeticGradientNode):
    """
    MPSNN*GradientNode (arithmetic)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, is_secondary_source_filter: bool) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter: (source_image: the other forward operand)
        """
class NNSubtractionGradientNode(NNArithmeticGradientNode):
    """
    MPSNN*GradientNode (arithmetic)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, is_secondary_source_filter: bool) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter: (source_image: the other forward operand)
        """
class NNMultiplicationGradientNode(NNArithmeticGradientNode):
    """
    MPSNN*GradientNode (arithmetic)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, is_secondary_source_filter: bool) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter: (source_image: the other forward operand)
        """
class CNNLossNode(NNFilterNode):
    """
    MPSCNNLossNode
    """
    def __init__(self, source: NNImageNode, loss_descriptor: CNNLossDescriptor) -> None:
        """
        +nodeWithSource:lossDescriptor: (labels: input_labels)
        """
    @property
    def input_labels(self) -> NNStateNode:
        """
        MPSCNNLossNode.inputLabels
        """
class CNNYOLOLossNode(NNFilterNode):
    """
    MPSCNNYOLOLossNode
    """
    def __init__(self, source: NNImageNode, loss_descriptor: CNNYOLOLossDescriptor) -> None:
        """
        +nodeWithSource:lossDescriptor: (labels: input_labels)
        """
    @property
    def input_labels(self) -> NNStateNode:
        """
        MPSCNNYOLOLossNode.inputLabels
        """
class NNInitialGradientNode(NNFilterNode):
    """
    MPSNNInitialGradientNode (a gradient of ones)
    """
    def __init__(self, source: NNImageNode) -> None:
        ...
class NNReshapeNode(NNFilterNode):
    """
    MPSNNReshapeNode
    """
    def __init__(self, source: NNImageNode, result_width: typing.SupportsInt | typing.SupportsIndex, result_height: typing.SupportsInt | typing.SupportsIndex, result_feature_channels: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSource:resultWidth:resultHeight:resultFeatureChannels:
        """
    @property
    def result_feature_channels(self) -> int:
        ...
    @property
    def result_height(self) -> int:
        ...
    @property
    def result_width(self) -> int:
        ...
class NNReshapeGradientNode(NNGradientFilterNode):
    """
    MPSNNReshapeGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:
        """
class NNPadNode(NNFilterNode):
    """
    MPSNNPadNode
    """
    def __init__(self, source: NNImageNode, padding_size_before: typing.Any, padding_size_after: typing.Any, edge_mode: ImageEdgeMode) -> None:
        """
        +nodeWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:
        """
    @property
    def edge_mode(self) -> ImageEdgeMode:
        ...
    @property
    def fill_value(self) -> float:
        """
        MPSNNPadNode.fillValue (edge mode CONSTANT)
        """
    @fill_value.setter
    def fill_value(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def padding_size_after(self) -> ImageCoordinate:
        ...
    @property
    def padding_size_before(self) -> ImageCoordinate:
        ...
class NNPadGradientNode(NNGradientFilterNode):
    """
    MPSNNPadGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:
        """
class CNNNormalizationNode(NNFilterNode):
    """
    MPSCNNNormalizationNode (abstract): alpha, beta, delta [1, 5, 1]
    """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        ...
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        ...
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNSpatialNormalizationNode(CNNNormalizationNode):
    """
    MPSCNNSpatialNormalizationNode
    """
    def __init__(self, source: NNImageNode, kernel_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSource:kernelSize:
        """
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
class CNNLocalContrastNormalizationNode(CNNNormalizationNode):
    """
    MPSCNNLocalContrastNormalizationNode; the node's defaults differ from the kernel's: alpha 1, beta 0.5, delta 2^-10, p0 1, pm 0, ps 1
    """
    def __init__(self, source: NNImageNode, kernel_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSource:kernelSize:
        """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        ...
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        ...
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def p0(self) -> float:
        ...
    @p0.setter
    def p0(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def pm(self) -> float:
        ...
    @pm.setter
    def pm(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def ps(self) -> float:
        ...
    @ps.setter
    def ps(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNCrossChannelNormalizationNode(CNNNormalizationNode):
    """
    MPSCNNCrossChannelNormalizationNode
    """
    def __init__(self, source: NNImageNode, kernel_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSource:kernelSize:
        """
    @property
    def kernel_size_in_feature_channels(self) -> int:
        ...
class CNNLocalNormalizationGradientNode(NNGradientFilterNode):
    """
    the local normalization gradient nodes' base: alpha, beta, delta (the builders copy the forward node's; a gradient node whose parameters differ from the forward pass's is refused at encode)
    """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        ...
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        ...
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNSpatialNormalizationGradientNode(CNNLocalNormalizationGradientNode):
    """
    MPSCNNSpatialNormalizationGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelSize:
        """
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
class CNNLocalContrastNormalizationGradientNode(CNNLocalNormalizationGradientNode):
    """
    MPSCNNLocalContrastNormalizationGradientNode (parameters default to the forward node's defaults)
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_width: typing.SupportsInt | typing.SupportsIndex, kernel_height: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:
        """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def beta(self) -> float:
        ...
    @beta.setter
    def beta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def delta(self) -> float:
        ...
    @delta.setter
    def delta(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def kernel_height(self) -> int:
        ...
    @property
    def kernel_width(self) -> int:
        ...
    @property
    def p0(self) -> float:
        ...
    @p0.setter
    def p0(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def pm(self) -> float:
        ...
    @pm.setter
    def pm(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def ps(self) -> float:
        ...
    @ps.setter
    def ps(self, arg1: typing.SupportsFloat) -> None:
        ...
class CNNCrossChannelNormalizationGradientNode(CNNLocalNormalizationGradientNode):
    """
    MPSCNNCrossChannelNormalizationGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:kernelSize:
        """
    @property
    def kernel_size(self) -> int:
        ...
class NNUnaryReductionNode(NNFilterNode):
    """
    MPSNNUnaryReductionNode (abstract)
    """
    @property
    def clip_rect_source(self) -> Region:
        """
        MPSNNUnaryReductionNode.clipRectSource [no clip]: the source region reduced
        """
    @clip_rect_source.setter
    def clip_rect_source(self, arg1: typing.Any) -> None:
        ...
class NNReductionSpatialMeanNode(NNUnaryReductionNode):
    """
    MPSNNReductionSpatialMeanNode
    """
    def __init__(self, source: NNImageNode) -> None:
        """
        +nodeWithSource:
        """
class NNReductionSpatialMeanGradientNode(NNGradientFilterNode):
    """
    MPSNNReductionSpatialMeanGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:
        """
class NNGramMatrixCalculationNode(NNFilterNode):
    """
    MPSNNGramMatrixCalculationNode
    """
    def __init__(self, source: NNImageNode, alpha: typing.SupportsFloat = 1.0) -> None:
        """
        +nodeWithSource:[alpha:]
        """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
    @property
    def property_call_back(self) -> typing.Any:
        """
        propertyCallBack (MPSNNGramMatrixCallback): None (use alpha), an object with alpha_for_source_image(source_image, destination_image) -> float, or such a callable; asked once per encode, and the training graph's gradient node uses the same alpha
        """
    @property_call_back.setter
    def property_call_back(self, arg1: typing.Any) -> None:
        ...
class NNGramMatrixCalculationGradientNode(NNGradientFilterNode):
    """
    MPSNNGramMatrixCalculationGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, alpha: typing.SupportsFloat = 1.0) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:[alpha:]
        """
    @property
    def alpha(self) -> float:
        ...
    @alpha.setter
    def alpha(self, arg1: typing.SupportsFloat) -> None:
        ...
class NNForwardLossNode(NNFilterNode):
    """
    MPSNNForwardLossNode: the loss (labels and weights are images)
    """
    @staticmethod
    def node_with_sources(sources: collections.abc.Sequence[NNImageNode], loss_descriptor: CNNLossDescriptor) -> NNForwardLossNode:
        """
        +nodeWithSources:lossDescriptor: ([predictions, labels(, weights)])
        """
    def __init__(self, source: NNImageNode, labels: NNImageNode, loss_descriptor: CNNLossDescriptor, weights: NNImageNode = None) -> None:
        """
        +nodeWithSource:labels:[weights:]lossDescriptor:
        """
    @property
    def delta(self) -> float:
        ...
    @property
    def epsilon(self) -> float:
        ...
    @property
    def label_smoothing(self) -> float:
        ...
    @property
    def loss_type(self) -> CNNLossType:
        ...
    @property
    def number_of_classes(self) -> int:
        ...
    @property
    def property_call_back(self) -> typing.Any:
        """
        propertyCallBack (MPSNNLossCallback): None, an object with scalar_weight_for_source_image(source_image, destination_image) -> float, or such a callable; asked once per encode for the loss weight
        """
    @property_call_back.setter
    def property_call_back(self, arg1: typing.Any) -> None:
        ...
    @property
    def reduce_across_batch(self) -> bool:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        ...
    @property
    def weight(self) -> float:
        ...
class NNLossGradientNode(NNGradientFilterNode):
    """
    MPSNNLossGradientNode
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, labels: NNImageNode, weights: NNImageNode, gradient_state: NNStateNode, loss_descriptor: CNNLossDescriptor, is_labels_gradient_filter: bool = False) -> None:
        """
        +nodeWithSourceGradient:sourceImage:labels:weights:gradientState:lossDescriptor:isLabelsGradientFilter: (weights and gradient_state may be None)
        """
    @property
    def is_labels_gradient_filter(self) -> bool:
        ...
    @property
    def loss_type(self) -> CNNLossType:
        ...
    @property
    def property_call_back(self) -> typing.Any:
        """
        propertyCallBack (MPSNNLossCallback): None, an object with scalar_weight_for_source_image(source_image, destination_image) -> float, or such a callable; asked once per encode for the loss weight
        """
    @property_call_back.setter
    def property_call_back(self, arg1: typing.Any) -> None:
        ...
    @property
    def reduction_type(self) -> CNNReductionType:
        ...
class CNNInstanceNormalizationNode(NNFilterNode):
    """
    MPSCNNInstanceNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or update_gamma_and_beta_with_instance_normalization_state_batch(states) (CPU style) is called
    """
    def __init__(self, source: NNImageNode, data_source: typing.Any) -> None:
        """
        +nodeWithSource:dataSource:
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle [UPDATE_DEVICE_GPU]
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNInstanceNormalizationGradientNode(NNGradientFilterNode):
    """
    MPSCNNInstanceNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or update_gamma_and_beta_with_instance_normalization_state_batch(states) (CPU style) is called
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle (copied from the forward node by the builders)
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNGroupNormalizationNode(NNFilterNode):
    """
    MPSCNNGroupNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or update_gamma_and_beta_with_group_normalization_state_batch(states) (CPU style) is called
    """
    def __init__(self, source: NNImageNode, data_source: typing.Any) -> None:
        """
        +nodeWithSource:dataSource:
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle [UPDATE_DEVICE_GPU]
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class CNNGroupNormalizationGradientNode(NNGradientFilterNode):
    """
    MPSCNNGroupNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or update_gamma_and_beta_with_group_normalization_state_batch(states) (CPU style) is called
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        +nodeWithSourceGradient:sourceImage:gradientState:
        """
    @property
    def training_style(self) -> NNTrainingStyle:
        """
        MPSNNTrainableNode.trainingStyle (copied from the forward node by the builders)
        """
    @training_style.setter
    def training_style(self, arg0: NNTrainingStyle) -> None:
        ...
class NNGraph:
    """
    MPSNNGraph
    """
    destination_image_allocator: ImageAllocator
    label: str
    output_state_is_temporary: bool
    @classmethod
    def from_bytes(cls: typing.Any, data: typing.Any, device: typing.Any = None, data_sources: typing.Any = None, handles: typing.Any = None) -> NNGraph:
        """
        -initWithCoder:device: a graph from to_bytes() data on `device` (a Device, 'cpu', 'metal' or None). Data sources are ready-made ones holding the captured weights unless `data_sources` (one entry per entry of the original's `data_sources`, None to keep the captured one) gives objects back; a training graph needs data sources that can update. `handles`: objects replacing the handles, in blob order (pickle passes them). SerializationError (a ValueError) for malformed data.
        """
    def __init__(self, device: Device | str, result_image: typing.Any, result_image_is_needed: typing.Any = None) -> None:
        """
        -initWithDevice:resultImage:resultImageIsNeeded: or, with a list of result images, -initWithDevice:resultImages:resultsAreNeeded: (a list of bools)
        """
    def __reduce__(self) -> tuple:
        ...
    def __reduce_ex__(self, protocol: typing.SupportsInt | typing.SupportsIndex) -> tuple:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def debug_description(self) -> str:
        """
        -[MPSNNGraph debugDescription]: the source images, every filter node in encode order (class, label, inputs -> result, states, training style) and the results; nodes are named by their handle's label, else numbered
        """
    @property
    def options(self) -> int:
        """
        MPSKernel.options (KernelOptions bits). VERBOSE: the first encode prints debug_description to stderr.
        """
    @options.setter
    def options(self, arg1: typing.SupportsInt) -> None:
        ...
    def encode(self, command_buffer: CommandBuffer, source_images: typing.Any, source_states: typing.Any = None, return_intermediates: bool = False) -> typing.Any:
        """
        -encodeToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:. Returns the result (None when not needed), or (result, intermediate_images, destination_states)
        """
    def encode_batch(self, command_buffer: CommandBuffer, source_images: typing.Any, source_states: typing.Any = None, return_intermediates: bool = False) -> typing.Any:
        """
        -encodeBatchToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates: (one list of images per source handle, one list of states per source state handle)
        """
    def execute_async(self, source_images: typing.Any, completion_handler: collections.abc.Callable, source_states: typing.Any = None) -> Image:
        """
        -executeAsyncWithSourceImages:completionHandler: — the handler is called once with (image, None) or (None, error message); returns the image (valid once the handler ran)
        """
    def read_count_for_source_image_at_index(self, index: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def read_count_for_source_state_at_index(self, index: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def reload_from_data_sources(self) -> None:
        ...
    def to_bytes(self) -> bytes:
        """
        -encodeWithCoder: the graph as bytes: every node, its parameters and properties, handles (as labels) and the weights of its data sources (docs/serialization.md "Graphs"). Call it when the graph's work has completed. ValueError naming the node for a node class or custom policy a graph blob cannot hold.
        """
    @property
    def batch_normalization_sync(self) -> typing.Any:
        """
        mpsgrad extension (docs/distributed.md "Synchronized batch normalization in a graph"): None or a callable(state, stage, count) run at host points of the command buffer: stage 'statistics' right after a batch normalization node computed its batch mean and variance (before the normalization reads them), stage 'gradients' right after its gradient node summed dgamma and dbeta (before the input gradient reads them); state is the node's CNNBatchNormalizationState, count the values per channel summarised on this process. It may replace the values in place (mpsgrad.distributed synchronizes them across processes). An exception fails the command buffer.
        """
    @batch_normalization_sync.setter
    def batch_normalization_sync(self, arg1: typing.Any) -> None:
        ...
    @property
    def before_updates(self) -> typing.Any:
        """
        mpsgrad extension (docs/graph.md "Before the updates"): None or a callable(gradient_states) run once the command buffer completed, with the gradient states of every trainable gradient node (a list), before their data sources update; it may change the gradients in place (mpsgrad.distributed averages them across processes). The trainable nodes must train UPDATE_DEVICE_CPU.
        """
    @before_updates.setter
    def before_updates(self, arg1: typing.Any) -> None:
        ...
    @property
    def data_sources(self) -> list:
        """
        The data sources of the graph's nodes, each once: convolution / fully connected ones in node order, then batch normalization ones (the order of from_bytes' data_sources)
        """
    @property
    def device(self) -> Device:
        ...
    @property
    def format(self) -> ImageFeatureChannelFormat:
        """
        Storage of the intermediates: FLOAT16 (default, as MPS) or FLOAT32. Results and exported images are FLOAT32 unless their image node's format is set
        """
    @format.setter
    def format(self, arg0: ImageFeatureChannelFormat) -> None:
        ...
    @property
    def fused_node_pairs(self) -> list[tuple[NNFilterNode, NNFilterNode]]:
        """
        mpsgrad: the (producer, neuron node) pairs that run as one kernel in the current neuron_fusion mode
        """
    @property
    def intermediate_image_handles(self) -> list:
        ...
    @property
    def last_encode_statistics(self) -> dict:
        """
        What the last encode did (mpsgrad): encoded_nodes (filter nodes encoded; a fused pair counts once), intermediate_buffers (buffers allocated for pooled intermediates), reused_buffers (allocations served by a released buffer), peak_live_buffers (most pooled buffers holding live images at once), fused_pairs (producer + neuron node pairs encoded as one kernel)
        """
    @property
    def neuron_fusion(self) -> str:
        """
        mpsgrad: which convolution / fully connected / batch normalization nodes run as one kernel with the one neuron node reading their result (docs/graph.md "Fusion"): 'auto' (default) the pairs whose fused kernel is faster on the device, 'all' every fusable pair, 'none' no pair
        """
    @neuron_fusion.setter
    def neuron_fusion(self, arg1: str) -> None:
        ...
    @property
    def nodes(self) -> list[NNFilterNode]:
        """
        The filter nodes in encode order
        """
    @property
    def result_handle(self) -> typing.Any:
        ...
    @property
    def result_image_is_needed(self) -> bool:
        ...
    @property
    def result_state_handles(self) -> list:
        ...
    @property
    def source_image_handles(self) -> list:
        ...
    @property
    def source_state_handles(self) -> list:
        ...
class CNNConcatenation(CNNMultiaryKernel):
    """
    mpsgrad extension (MPS has no concatenation kernel; its graph node writes at channel offsets): concatenates source_count images along feature channels. Source i's channels land at destination_feature_channel_offset + start_i with start_0 = 0, start_{i+1} = start_i + round_up_4(channels_i) (each range starts at a multiple of 4; gap channels are 0). Destination pixel clip_rect.origin + p of source i reads its pixel offset_at_index(i) + p (edge_mode ZERO or CLAMP). Every source has the same width and height. result_state gives an NNMultiaryGradientState for CNNConcatenationGradient.
    """
    @staticmethod
    def range_starts(channels: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[int]:
        """
        The first destination channel of each source that delivers channels[i] channels.
        """
    def __init__(self, device: Device | str, source_count: typing.Any) -> None:
        """
        (device, source_count), like -initWithDevice:sourceCount:
        """
class CNNConcatenationGradient(CNNGradientKernel):
    """
    mpsgrad extension: the gradient of CNNConcatenation with respect to source source_index: the slice of source_gradient holding that source's channel range, written where the forward pass read the source (pixels it did not read are 0). gradient_state: the forward NNMultiaryGradientState; source_image: the forward source (only its size is read).
    """
    def __init__(self, device: Device | str, source_index: typing.Any) -> None:
        ...
    @property
    def source_index(self) -> int:
        ...
class NNMultiaryGradientStateNode(NNStateNode):
    """
    MPSNNMultiaryGradientStateNode
    """
class NNConcatenationNode(NNFilterNode):
    """
    MPSNNConcatenationNode: concatenates its sources along feature channels, each source's range rounded up to a multiple of 4 (spec §2.11). gradient_filters_with_sources gives one NNConcatenationGradientNode per source; gradient_filter_with_source(s) is unavailable (TypeError) for several sources.
    """
    @staticmethod
    def node_with_sources(sources: collections.abc.Sequence[NNImageNode]) -> NNConcatenationNode:
        """
        +nodeWithSources:
        """
    def __init__(self, sources: collections.abc.Sequence[NNImageNode]) -> None:
        """
        -initWithSources:
        """
class NNConcatenationGradientNode(NNGradientFilterNode):
    """
    MPSNNConcatenationGradientNode: the slice of source_gradient for source_image's channel range
    """
    def __init__(self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode) -> None:
        """
        -initWithSourceGradient:sourceImage:gradientState: (gradient_state: the NNConcatenationNode's result state; source_image: one of its sources)
        """
    @property
    def source_index(self) -> int:
        ...
class SerializationError(ValueError):
    pass
def CNNDepthWiseConvolutionDescriptor(kernel_width: typing.SupportsInt | typing.SupportsIndex = 3, kernel_height: typing.SupportsInt | typing.SupportsIndex = 3, input_feature_channels: typing.SupportsInt | typing.SupportsIndex = 0, output_feature_channels: typing.SupportsInt | typing.SupportsIndex = 0, neuron: typing.Any = None) -> CNNConvolutionDescriptor:
    """
    MPSCNNDepthWiseConvolutionDescriptor (channel multiplier 1: output == input channels); weights are (channels, kernel_height, kernel_width, 1)
    """
def CNNDilatedPoolingMaxNode(source: NNImageNode, filter_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex, dilation_rate: typing.SupportsInt | typing.SupportsIndex) -> CNNPoolingNode:
    """
    MPSCNNDilatedPoolingMaxNode +nodeWithSource:filterSize:stride:dilationRate:
    """
def CNNPoolingAverageNode(source: NNImageNode, filter_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.Any = None, kernel_width: typing.Any = None, kernel_height: typing.Any = None, stride_in_pixels_x: typing.Any = None, stride_in_pixels_y: typing.Any = None) -> CNNPoolingNode:
    """
    MPSCNNPooling*Node: +nodeWithSource:filterSize:[stride:] or kernel_width/height, stride_in_pixels_x/y (edge mode Clamp)
    """
def CNNPoolingL2NormNode(source: NNImageNode, filter_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.Any = None, kernel_width: typing.Any = None, kernel_height: typing.Any = None, stride_in_pixels_x: typing.Any = None, stride_in_pixels_y: typing.Any = None) -> CNNPoolingNode:
    """
    MPSCNNPooling*Node: +nodeWithSource:filterSize:[stride:] or kernel_width/height, stride_in_pixels_x/y (edge mode Clamp)
    """
def CNNPoolingMaxNode(source: NNImageNode, filter_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.Any = None, kernel_width: typing.Any = None, kernel_height: typing.Any = None, stride_in_pixels_x: typing.Any = None, stride_in_pixels_y: typing.Any = None) -> CNNPoolingNode:
    """
    MPSCNNPooling*Node: +nodeWithSource:filterSize:[stride:] or kernel_width/height, stride_in_pixels_x/y (edge mode Clamp)
    """
def CNNUpsamplingBilinearNode(source: NNImageNode, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex, align_corners: bool = False) -> CNNUpsamplingNode:
    ...
def CNNUpsamplingNearestNode(source: NNImageNode, integer_scale_factor_x: typing.SupportsInt | typing.SupportsIndex, integer_scale_factor_y: typing.SupportsInt | typing.SupportsIndex) -> CNNUpsamplingNode:
    ...
def NNAdditionNode(left_source: NNImageNode, right_source: NNImageNode) -> NNBinaryArithmeticNode:
    """
    +nodeWithLeftSource:rightSource:
    """
def NNDivisionNode(left_source: NNImageNode, right_source: NNImageNode) -> NNBinaryArithmeticNode:
    """
    +nodeWithLeftSource:rightSource:
    """
def NNMultiplicationNode(left_source: NNImageNode, right_source: NNImageNode) -> NNBinaryArithmeticNode:
    """
    +nodeWithLeftSource:rightSource:
    """
def NNSubtractionNode(left_source: NNImageNode, right_source: NNImageNode) -> NNBinaryArithmeticNode:
    """
    +nodeWithLeftSource:rightSource:
    """
def _is_initialized(object: typing.Any) -> bool:
    """
    Internal: whether a bound object's C++ part has been constructed.
    """
def batch_from_numpy(array: typing.Any, device: Device | str | None = None, channel_format: ImageFeatureChannelFormat | None = None) -> list[Image]:
    """
    An image batch (list of Image, one contiguous allocation) from an (n, height, width, channels) array; channel_format as for Image.from_numpy.
    """
def blas_info() -> str:
    """
    The BLAS the CPU backend's matrix products run on: OpenBLAS (scipy-openblas32) on Linux,
    Accelerate on macOS, with its build configuration.
    """
def buffer_cache_limit() -> int:
    """
    The most bytes of freed host buffers the CPU backend keeps for reuse: MPSGRAD_CPU_BUFFER_CACHE_MB
    MiB (read at import; default 1024), 0 when reuse is off (always in AddressSanitizer builds).
    """
def cached_buffer_bytes() -> int:
    """
    Bytes of freed host buffers the CPU backend holds for reuse (see release_cached_buffers).
    """
def get_num_threads() -> int:
    """
    Number of threads the CPU backend runs its ops on (see set_num_threads).
    """
def image_batch_increment_read_count(batch: collections.abc.Sequence[Image], amount: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    MPSImageBatchIncrementReadCount: each unique temporary image once; returns the unique count.
    """
def image_batch_iterate(batch: collections.abc.Sequence[Image], iterator: collections.abc.Callable[[Image, int], typing.SupportsInt | typing.SupportsIndex]) -> int:
    """
    MPSImageBatchIterate: calls iterator(image, index) once for each distinct image of the batch, in order, with the index of its first appearance; a negative return value stops the iteration. Returns the value of the last call (0 for an empty batch).
    """
def image_batch_resource_size(batch: collections.abc.Sequence[Image]) -> int:
    """
    MPSImageBatchResourceSize: the sum of resource_size over the distinct images of the batch (an image that appears several times counts once).
    """
def image_batch_synchronize(batch: collections.abc.Sequence[Image], command_buffer: CommandBuffer) -> None:
    """
    MPSImageBatchSynchronize: synchronize_on_command_buffer(command_buffer) on each distinct image of the batch (once per image however often it appears); ValueError when an image cannot be used with the command buffer.
    """
def padding_destination_size(source_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex, kernel_size: typing.SupportsInt | typing.SupportsIndex, style: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    DestSize of the MPSNNPadding arithmetic (style -1, 0 or 1).
    """
def padding_offset(source_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex, kernel_size: typing.SupportsInt | typing.SupportsIndex, method: typing.SupportsInt | typing.SupportsIndex, axis: str = 'x', reverse: bool = False) -> int:
    """
    The window-centre offset the MPSNNPadding arithmetic gives along an axis.
    """
def release_cached_buffers() -> None:
    """
    Frees the large host buffers the CPU backend keeps for reuse after their images were
    released (up to MPSGRAD_CPU_BUFFER_CACHE_MB MiB, default 1024; 0 turns reuse off).
    Reuse spares each allocation the page faults of fresh memory; results never depend on it.
    """
def set_num_threads(n: typing.Any) -> None:
    """
    Sets the number of threads the CPU backend runs its ops on (work committed from now on).
    
    n must be an int >= 1 (ValueError otherwise). The default comes from the environment
    variable MPSGRAD_NUM_THREADS, else the CPUs available to the process (CPU affinity and
    cgroup quota). The BLAS calls of the CPU backend run inside these threads.
    """
def state_batch_increment_read_count(batch: collections.abc.Sequence[State], amount: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    MPSStateBatchIncrementReadCount: each unique state once; returns the unique count.
    """
def state_batch_resource_size(batch: collections.abc.Sequence[State]) -> int:
    """
    MPSStateBatchResourceSize: the sum of resource_size over the distinct states of the batch (a state shared by several entries counts once).
    """
def state_batch_synchronize(batch: collections.abc.Sequence[State], command_buffer: CommandBuffer) -> None:
    """
    MPSStateBatchSynchronize: synchronize_on_command_buffer(command_buffer) on each distinct state of the batch; ValueError when a state cannot be used with the command buffer.
    """
def supports_mtl_device(device: Device | None) -> bool:
    """
    MPSSupportsMTLDevice: True when mpsgrad runs on `device` (every Device it can create: the CPU, and Metal where built); False for None.
    """
def synchronize() -> None:
    """
    mpsgrad extension (like torch.mps.synchronize()): waits until every command buffer committed from Python has completed and its completed handlers have run. Called from a completed handler or host callback while that wait could never return (the callback's own buffer, or a later one of its queue, is pending) it raises CommandBufferError instead. The emulated Metal device of the Linux test build runs command buffers only when the host waits, so this is what drives an execute_async there.
    """
RECT_NO_CLIP: Region
