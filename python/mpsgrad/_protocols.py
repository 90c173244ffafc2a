"""The protocols of Apple's training API that Python code implements (typing.Protocol classes).

mpsgrad accepts any object with the listed members (duck typing, as Objective-C protocols do); these
classes give the members a name and a type for type checkers, and ``isinstance`` checks at run time
(``runtime_checkable``: member presence only). The data-source protocols are bound classes of the
extension (``CNNConvolutionDataSource`` and its siblings), since they also carry default behaviour.
"""
from __future__ import annotations

from typing import Protocol, Union, runtime_checkable

from ._mpsgrad import Image, NNTrainingStyle


@runtime_checkable
class Handle(Protocol):
    """MPSHandle: tags image and state nodes so a graph can report its inputs and results by handle.

    ``label`` may be a method (as in MPS, ``-label``) or an attribute; the graph reads it as ``str``.
    """

    def label(self) -> str: ...


@runtime_checkable
class NNTrainableNode(Protocol):
    """MPSNNTrainableNode: the trainable nodes (convolution, fully connected, batch / instance / group
    normalization and their gradient nodes) carry ``training_style`` [UPDATE_DEVICE_GPU]."""

    training_style: NNTrainingStyle


@runtime_checkable
class NNLossCallback(Protocol):
    """MPSNNLossCallback: ``NNForwardLossNode.property_call_back`` / ``NNLossGradientNode.property_call_back``;
    asked once per encode for the loss weight (a plain callable with the same arguments also works)."""

    def scalar_weight_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...


@runtime_checkable
class NNGramMatrixCallback(Protocol):
    """MPSNNGramMatrixCallback: ``NNGramMatrixCalculationNode.property_call_back``; asked once per encode
    for alpha (a plain callable with the same arguments also works)."""

    def alpha_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...


@runtime_checkable
class ImageSizeEncodingState(Protocol):
    """MPSImageSizeEncodingState: a state that remembers its forward source's size (the convolution
    gradient state conforms), so a reverse operation can undo the rounding of ``size / stride``."""

    @property
    def source_width(self) -> int: ...

    @property
    def source_height(self) -> int: ...


__all__ = ["Handle", "NNTrainableNode", "NNLossCallback", "NNGramMatrixCallback", "ImageSizeEncodingState"]
