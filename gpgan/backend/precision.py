"""The precision of matrix products: float32, or bf16 operands with float32 accumulation (CUDA).

``bf16`` is mixed precision as PyTorch's autocast does it for products: the operands of every
float32 product on the GPU (linear layers, and convolutions, which gpgan computes as products) are
rounded to bfloat16 (round to nearest even) and multiplied on the tensor cores with float32
accumulation and a float32 result. Everything else, the weights (float32 master copies), the
optimizer, normalization, the losses and the penalties' sums, stays float32. bf16 keeps float32's
exponent range, so no loss scaling is needed. float64 products and every product on the CPU stay
as they are: the CPU trains in float32.

The setting is the process's (a training step enters it with :func:`matmul_precision`), and it is
read when a product is launched, so a CUDA graph captured under it replays it.
"""
import contextlib

__all__ = ["MATMUL_PRECISIONS", "get_matmul_precision", "matmul_precision"]

MATMUL_PRECISIONS = ("float32", "bf16")
_current = "float32"


def get_matmul_precision():
    """The precision of CUDA float32 products now: 'float32' or 'bf16'."""
    return _current


@contextlib.contextmanager
def matmul_precision(name):
    """Run the block's CUDA float32 products at precision ``name`` (one of MATMUL_PRECISIONS)."""
    global _current
    if name not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul precision {name!r} is not one of {', '.join(MATMUL_PRECISIONS)}")
    before, _current = _current, name
    try:
        yield
    finally:
        _current = before
