"""RMSprop (Hinton's lecture 6e), torch semantics."""
from gpgan.backend import get_array_module
from gpgan.optim.optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop as torch.optim.RMSprop computes it:

        ``g = grad + weight_decay * p``; ``s = alpha s + (1 - alpha) g^2``;
        centered: ``a = alpha a + (1 - alpha) g`` and ``d = sqrt(max(s - a^2, 0)) + eps`` (torch: without the
            max, NaN where rounding makes the difference negative), else ``d = sqrt(s) + eps``;
        with momentum: ``buf = momentum buf + g / d`` and ``p -= lr buf``, else ``p -= lr g / d``.

    Args:
        params: iterable of Parameters.
        lr: learning rate (``.lr`` is settable).
        alpha: smoothing constant of the squared-gradient average, in [0, 1).
        eps: added to the denominator (after the square root).
        weight_decay: L2 coefficient added to the gradient.
        momentum: momentum factor (0: none).
        centered: normalize by the estimated variance instead of the raw second moment.
    """

    _hyperparameters = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")

    def __init__(self, params, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
        super().__init__(params)
        self.lr = self._check_nonnegative("lr", lr)
        self.alpha = self._check_fraction("alpha", alpha)
        self.eps = self._check_nonnegative("eps", eps)
        self.weight_decay = self._check_nonnegative("weight_decay", weight_decay)
        self.momentum = self._check_nonnegative("momentum", momentum)
        self.centered = bool(centered)

    def _state_names_for(self, config):
        # only the arrays this configuration uses are kept (and saved)
        names = ("square_avg",)
        if config["momentum"] > 0:
            names += ("momentum_buffer",)
        if config["centered"]:
            names += ("grad_avg",)
        return names

    def _update(self, data, grad, state, numbers):
        xp = get_array_module(data)
        dt = data.dtype.type
        if self.weight_decay != 0:
            grad = grad + dt(self.weight_decay) * data
        square_avg = state["square_avg"]
        square_avg *= dt(self.alpha)
        square_avg += dt(1.0 - self.alpha) * (grad * grad)
        if self.centered:
            grad_avg = state["grad_avg"]
            grad_avg *= dt(self.alpha)
            grad_avg += dt(1.0 - self.alpha) * grad
            # The variance estimate E[g^2] - E[g]^2 can round below zero where the gradient barely
            # varies, and its root would be NaN in finite weights: clipped at 0 (torch's formula
            # otherwise; torch leaves the NaN).
            denom = xp.sqrt(xp.maximum(square_avg - grad_avg * grad_avg, dt(0.0)))
        else:
            denom = xp.sqrt(square_avg)
        denom += dt(self.eps)
        if self.momentum > 0:
            buf = state["momentum_buffer"]
            buf *= dt(self.momentum)
            buf += grad / denom
            data -= self._rate(numbers[0], dt) * buf
        else:
            data -= self._rate(numbers[0], dt) * (grad / denom)
