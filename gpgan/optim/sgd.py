"""Stochastic gradient descent with momentum, torch semantics."""
from gpgan.optim.optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """SGD as torch.optim.SGD computes it:

        ``g = grad + weight_decay * p``;
        with momentum: ``buf = g`` on the first step, then ``buf = momentum * buf + (1 - dampening) * g``,
        and ``g = g + momentum * buf`` (nesterov) or ``g = buf``;
        ``p -= lr * g``.

    Args:
        params: iterable of Parameters.
        lr: learning rate (``.lr`` is settable).
        momentum: momentum factor (0 disables the buffer).
        dampening: dampening of the momentum's gradient term.
        weight_decay: L2 coefficient added to the gradient.
        nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
    """

    _hyperparameters = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
    _created_in_update = ("momentum_buffer",)

    def _state_names_for(self, config):
        return ("momentum_buffer",) if config["momentum"] != 0 else ()

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params)
        self.lr = self._check_nonnegative("lr", lr)
        self.momentum = self._check_nonnegative("momentum", momentum)
        self.dampening = dampening
        self.weight_decay = self._check_nonnegative("weight_decay", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov=True needs momentum > 0 and dampening == 0, "
                             f"got momentum={momentum}, dampening={dampening}")
        self.nesterov = bool(nesterov)

    def _update(self, data, grad, state, numbers):
        dt = data.dtype.type
        if self.weight_decay != 0:
            grad = grad + dt(self.weight_decay) * data
        if self.momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                # torch starts the buffer at the first gradient, undamped
                buf = state["momentum_buffer"] = grad.copy()
            else:
                buf *= dt(self.momentum)
                buf += dt(1.0 - self.dampening) * grad
            grad = grad + dt(self.momentum) * buf if self.nesterov else buf
        data -= self._rate(numbers[0], dt) * grad
