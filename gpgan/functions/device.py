"""Copying a Variable between devices, differentiably."""
from gpgan.autograd import FunctionNode
from gpgan.backend import device_of, to_device as _array_to_device


__all__ = ['to_device']

class ToDevice(FunctionNode):
    def __init__(self, device):
        self.device = device

    def forward(self, inputs):
        x, = inputs
        self.source = device_of(x)
        return (_array_to_device(x, self.device),)

    def backward(self, indexes, grad_outputs):
        return (to_device(grad_outputs[0], self.source),)


def to_device(x, device):
    """``x`` on ``device`` (``"cpu"`` or ``"cuda"``); ``x`` itself when it is already there.

    Gradients flow back to the source device.
    """
    if device_of(x.data) == device:
        return x
    return ToDevice(device).apply((x,))[0]
