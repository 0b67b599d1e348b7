"""``Optimizer``: the base class of Adam, SGD and RMSprop (a list of parameters and their state).

An optimizer holds a flat list of parameters (Variables with ``requires_grad=True``, e.g.
``gpgan.nn.Parameter``); param groups are not supported, one optimizer per network is the norm
for GANs. ``step()`` rewrites ``p.data`` in place from ``p.grad.data``. Each parameter's state
(``step`` and the optimizer's running arrays) is created on its first update, on the parameter's
device and in its dtype, and the arithmetic is done with the parameter's array module, so
float32 stays float32 and CuPy parameters are updated on the GPU.

``state_dict()`` is a flat dict of numbers, strings and arrays, e.g. for Adam::

    {"type": "Adam", "num_params": 2, "step_count": 10, "lr": 1e-3, "beta1": 0.9, ...,
     "state.0.step": 10, "state.0.exp_avg": array, "state.0.exp_avg_sq": array, ...}

where ``state.<i>`` is the state of the i-th parameter in the order given to the constructor.
"""
from gpgan.autograd import Variable
from gpgan.backend import device_of, get_array_module, to_device
from gpgan.backend.graph import host_effect, host_number

__all__ = ["Optimizer"]


def _as_parameter_list(params, owner):
    if isinstance(params, Variable):
        raise TypeError(f"{owner}: params must be an iterable of Parameters, got a single Variable; "
                        "wrap it in a list")
    if hasattr(params, "named_parameters"):
        raise TypeError(f"{owner}: params must be an iterable of Parameters, got a "
                        f"{type(params).__name__}; pass module.parameters()")
    params = list(params)
    if not params:
        raise ValueError(f"{owner}: got an empty parameter list")
    seen = set()
    for i, p in enumerate(params):
        if not isinstance(p, Variable):
            raise TypeError(f"{owner}: params[{i}] is a {type(p).__name__}, not a Parameter/Variable "
                            "(param groups given as dicts are not supported)")
        if not p.requires_grad:
            raise ValueError(f"{owner}: params[{i}] (shape {p.shape}) has requires_grad=False; "
                             "only trainable parameters can be optimized")
        if id(p) in seen:
            raise ValueError(f"{owner}: params[{i}] appears more than once in the parameter list")
        seen.add(id(p))
    return params


def _copy_like(array, reference):
    """A fresh copy of ``array`` on ``reference``'s device, in ``reference``'s dtype."""
    return to_device(array, device_of(reference)).astype(reference.dtype, copy=True)


class Optimizer:
    """Base class: subclasses set ``_hyperparameters``, override ``_state_names_for`` and write
    ``_update``.

    Attributes:
        params: the list of parameters, in the order given.
        state: one dict per parameter: ``{"step": int, <state name>: array, ...}``, empty
            until the parameter's first update.
        step_count: how many times ``step()`` was called.
        lr: the learning rate (settable, e.g. by a schedule).
    """

    #: names of the float/int/bool attributes saved in the state dict (besides ``step_count``)
    _hyperparameters = ("lr",)

    def _state_names_for(self, config):
        """Names of the per-parameter arrays (each of the parameter's shape) that an optimizer with
        hyperparameters ``config`` (a mapping) keeps, e.g. SGD keeps a momentum buffer only when
        ``config["momentum"] != 0``."""
        return ()

    @property
    def _state_names(self):
        return self._state_names_for(self._hyperparameter_values())

    def __init__(self, params):
        self.params = _as_parameter_list(params, type(self).__name__)
        self.state = [{} for _ in self.params]
        self.step_count = 0

    # -- hyperparameter checks -------------------------------------------------------------------
    def _check_nonnegative(self, name, value):
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"{type(self).__name__}: {name} must be >= 0, got {value}")
        return value

    def _check_fraction(self, name, value):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{type(self).__name__}: {name} must be in [0, 1), got {value}")
        return value

    # -- training ----------------------------------------------------------------------------------
    def zero_grad(self):
        """Drop every parameter's gradient (``p.grad = None``)."""
        for p in self.params:
            p.grad = None

    def step(self, gate=None):
        """Update every parameter that has a gradient; parameters with ``grad is None`` are skipped
        (their state, including their step count, does not advance, as in torch).

        Args:
            gate: None, or a 0-d boolean array on the parameters' device. Where it is False the
                update is computed from zero gradients and applied with a step size of 0, so the
                parameters keep their values exactly and the state stays finite, without reading
                the device (a training step stops a run on a non-finite gradient this way).
        """
        updates = []  # (index, data, gradient, state) of each parameter with a gradient
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad.data if isinstance(p.grad, Variable) else p.grad
            if grad.shape != p.data.shape:
                raise ValueError(f"{type(self).__name__}.step: params[{i}] has shape {p.data.shape} "
                                 f"but its gradient has shape {grad.shape}")
            grad = grad.astype(p.data.dtype, copy=False)
            if gate is not None:
                grad = get_array_module(grad).where(gate, grad, grad.dtype.type(0))
            updates.append((i, p.data, grad, self._state_for(i, p.data)))
        numbers = host_effect(self._advance, [(i, data.dtype) for i, data, _, _ in updates])
        self._gate = gate
        self._gate_by_dtype = {}
        try:
            for (i, data, grad, state), step_numbers in zip(updates, numbers):
                self._update(data, grad, state, step_numbers)
        finally:
            self._gate = None

    _gate = None

    def _advance(self, updates):
        """The host side of one step (replayed as it is when the step is a CUDA graph): counts the
        step for each updated parameter (``(index, dtype)``) and returns, per parameter, its
        :meth:`_step_numbers` as the kernels read them (:func:`gpgan.backend.graph.host_number`)."""
        numbers = []
        for i, dtype in updates:
            state = self.state[i]
            state["step"] += 1
            numbers.append(tuple(host_number(v, dtype) for v in self._step_numbers(state)))
        self.step_count += 1
        return numbers

    def _step_numbers(self, state):
        """The numbers of one parameter's update that change from step to step, computed on the
        host after its step count advanced: here the learning rate (Adam adds its bias
        corrections)."""
        return (self.lr,)

    def _rate(self, rate, dt):
        """A step size (one of :meth:`_step_numbers`, in the dtype ``dt``) times the gate of
        :meth:`step` when given."""
        if self._gate is None:
            return rate
        gate = self._gate_by_dtype.get(dt)
        if gate is None:
            gate = self._gate_by_dtype[dt] = self._gate.astype(dt)
        return rate * gate

    def _state_for(self, i, data):
        """The state of parameter ``i``: arrays it lacks are created as zeros (on its first update,
        or when a hyperparameter change asks for a new array), and arrays are moved to the
        parameter's device if it moved since (``module.to(device)`` after building the optimizer).
        Names listed in ``_created_in_update`` are left for ``_update`` to create."""
        state = self.state[i]
        if not state:
            state["step"] = 0
        for name in self._state_names:
            if name not in state:
                if name not in self._created_in_update:
                    state[name] = get_array_module(data).zeros_like(data)
            elif device_of(state[name]) != device_of(data):
                state[name] = _copy_like(state[name], data)
        return state

    #: state arrays that ``_update`` initializes itself (e.g. SGD's buffer starts at the gradient)
    _created_in_update = ()

    def _update(self, data, grad, state, numbers):
        """Update ``data`` in place from ``grad`` (same dtype and shape); ``state["step"]`` is
        already incremented, so it is 1 on the first update, and ``numbers`` are this update's
        :meth:`_step_numbers` in ``data``'s dtype (scalars, or 0-d device arrays in a CUDA graph)."""
        raise NotImplementedError

    # -- state ---------------------------------------------------------------------------------------
    def _hyperparameter_values(self):
        return {name: getattr(self, name) for name in self._hyperparameters}

    def _set_hyperparameters(self, values):
        for name, value in values.items():
            # 0-d arrays (a state dict read back from disk by other means) become Python numbers
            setattr(self, name, value.item() if hasattr(value, "item") else value)

    def state_dict(self):
        """A flat dict: ``type``, ``num_params``, ``step_count``, the hyperparameters, and for each
        parameter ``i`` that has state, ``state.<i>.step`` and ``state.<i>.<name>`` (copies, on the
        parameter's device)."""
        out = {"type": type(self).__name__, "num_params": len(self.params), "step_count": self.step_count}
        out.update(self._hyperparameter_values())
        for i, state in enumerate(self.state):
            if not state:
                continue
            out[f"state.{i}.step"] = int(state["step"])
            for name in self._state_names:
                if name in state:
                    out[f"state.{i}.{name}"] = state[name].copy()
        return out

    def validate_state_dict(self, state_dict):
        """Raise ValueError naming the first entry of ``state_dict`` that does not fit this optimizer
        (wrong type, parameter count, missing/unexpected key, or a shape that differs from the
        parameter's); change nothing."""
        owner = f"{type(self).__name__}.load_state_dict"
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"{owner}: expected a dict, got {type(state_dict).__name__}")
        kind = state_dict.get("type", type(self).__name__)
        if kind != type(self).__name__:
            raise ValueError(f"{owner}: the state dict is for a {kind} optimizer, not {type(self).__name__}")
        for key in ("num_params", "step_count") + tuple(self._hyperparameters):
            if key not in state_dict:
                raise ValueError(f"{owner}: missing key {key!r}")
        n = int(state_dict["num_params"])
        if n != len(self.params):
            raise ValueError(f"{owner}: the state dict has {n} parameters but this optimizer has "
                             f"{len(self.params)} (entry 'num_params')")
        state_names = self._state_names_for(state_dict)
        per_param = self._per_parameter_keys(state_dict, state_names, owner)
        for i, names in sorted(per_param.items()):
            if "step" not in names:
                raise ValueError(f"{owner}: missing key 'state.{i}.step' (parameter {i} has other state)")
            for name in state_names:
                if name not in names:
                    if name in self._created_in_update:
                        continue  # may legitimately be absent before the first update
                    raise ValueError(f"{owner}: missing key 'state.{i}.{name}' (parameter {i} has other state)")
                value = state_dict[f"state.{i}.{name}"]
                expected = tuple(self.params[i].shape)
                if tuple(value.shape) != expected:
                    raise ValueError(f"{owner}: entry 'state.{i}.{name}' has shape {tuple(value.shape)} "
                                     f"but parameter {i} has shape {expected}")

    def _per_parameter_keys(self, state_dict, state_names, owner):
        known = {"type", "num_params", "step_count", *self._hyperparameters}
        allowed = {"step", *state_names}
        per_param = {}
        for key in state_dict:
            if key in known:
                continue
            parts = key.split(".")
            if (len(parts) != 3 or parts[0] != "state" or not parts[1].isdigit()
                    or int(parts[1]) >= len(self.params) or parts[2] not in allowed):
                raise ValueError(f"{owner}: unexpected key {key!r}")
            per_param.setdefault(int(parts[1]), set()).add(parts[2])
        return per_param

    def load_state_dict(self, state_dict):
        """Restore the step count, hyperparameters (``lr`` included) and per-parameter state from
        :meth:`state_dict` output; arrays are copied onto each parameter's device and dtype.
        Everything is validated first (see :meth:`validate_state_dict`), so a failed load changes
        nothing."""
        self.validate_state_dict(state_dict)
        self._set_hyperparameters({name: state_dict[name] for name in self._hyperparameters})
        self.step_count = int(state_dict["step_count"])
        for i, p in enumerate(self.params):
            if f"state.{i}.step" not in state_dict:
                self.state[i] = {}
                continue
            state = {"step": int(state_dict[f"state.{i}.step"])}
            for name in self._state_names:
                key = f"state.{i}.{name}"
                if key in state_dict:
                    state[name] = _copy_like(state_dict[key], p.data)
            self.state[i] = state

    def __repr__(self):
        hyper = ", ".join(f"{k}={v}" for k, v in self._hyperparameter_values().items())
        return f"{type(self).__name__}({len(self.params)} parameters, {hyper})"
