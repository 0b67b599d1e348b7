"""Adam (Kingma & Ba, 2015) with torch's semantics, including its L2 weight decay."""
import math

from gpgan.backend import get_array_module
from gpgan.optim.optimizer import Optimizer

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam: ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``, and at step t

        ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``

    (bias-corrected, with ``eps`` added after the correction, as torch.optim.Adam does).

    Args:
        params: iterable of Parameters (Variables with ``requires_grad=True``).
        lr: learning rate (the ``.lr`` attribute is settable).
        betas: ``(b1, b2)``, each in [0, 1).
        eps: added to the denominator for numerical stability.
        weight_decay: L2 penalty coefficient, *added to the gradient* (``g = g + wd * p``) before
            the moments are updated, exactly as torch.optim.Adam does. This is not AdamW's
            decoupled decay: the decay is rescaled by the adaptive denominator.
    """

    _hyperparameters = ("lr", "beta1", "beta2", "eps", "weight_decay")

    def _state_names_for(self, config):
        return ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        self.lr = self._check_nonnegative("lr", lr)
        self.betas = betas
        self.eps = self._check_nonnegative("eps", eps)
        self.weight_decay = self._check_nonnegative("weight_decay", weight_decay)

    @property
    def betas(self):
        return (self.beta1, self.beta2)

    @betas.setter
    def betas(self, value):
        beta1, beta2 = value
        self.beta1 = self._check_fraction("betas[0]", beta1)
        self.beta2 = self._check_fraction("betas[1]", beta2)

    def _step_numbers(self, state):
        # beta2 is among the per-step numbers (not a constant of the kernels) because a schedule
        # may move it (R3GAN: 0.9 -> 0.99), and a replayed CUDA graph must read its new value.
        t = state["step"]
        correction1 = 1.0 - self.beta1 ** t
        correction2 = 1.0 - self.beta2 ** t
        return self.lr / correction1, math.sqrt(correction2), self.beta2, 1.0 - self.beta2

    def _update(self, data, grad, state, numbers):
        xp = get_array_module(data)
        dt = data.dtype.type  # every scalar in the parameter's dtype: float32 stays float32
        if self.weight_decay != 0:
            grad = grad + dt(self.weight_decay) * data
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= dt(self.beta1)
        m += dt(1.0 - self.beta1) * grad
        rate, root_correction2, beta2, one_minus_beta2 = numbers
        v *= beta2
        v += one_minus_beta2 * (grad * grad)
        denom = xp.sqrt(v)
        denom /= root_correction2
        denom += dt(self.eps)
        data -= self._rate(rate, dt) * (m / denom)
