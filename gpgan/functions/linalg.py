"""Matrix products: matmul (batched, NumPy semantics) and linear (``x @ W.T + b``)."""
from gpgan.autograd import FunctionNode
from gpgan.backend import get_array_module
from gpgan.functions.array import sum_to, transpose


__all__ = ['matmul']

def _swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


class MatMul(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned for a @ b")
        self.retain_inputs((0, 1))
        return (get_array_module(a).matmul(a, b),)

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        from gpgan.functions.array import reshape
        # Promote vectors to matrices so one rule covers every case.
        a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
        b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
        gy2 = gy
        if a.ndim == 1:
            gy2 = reshape(gy2, gy.shape[:-1] + (1,) + gy.shape[-1:]) if b.ndim > 1 else reshape(gy2, (1,))
        if b.ndim == 1:
            gy2 = reshape(gy2, gy2.shape + (1,))
        out = []
        for i in indexes:
            if i == 0:
                ga = matmul(gy2, _swap_last(b2))
                out.append(reshape(sum_to(ga, a2.shape), a.shape))
            else:
                gb = matmul(_swap_last(a2), gy2)
                out.append(reshape(sum_to(gb, b2.shape), b.shape))
        return tuple(out)


def matmul(a, b):
    """``a @ b`` with NumPy's matmul rules (batched, broadcast leading dimensions)."""
    return MatMul().apply((a, b))[0]
