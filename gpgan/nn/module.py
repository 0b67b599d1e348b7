"""``Module``, ``Parameter``, ``ForwardPreHook`` and the containers ``Sequential`` / ``ModuleList``.

The API follows ``torch.nn.Module`` closely (attribute registration, dotted parameter names,
``state_dict`` keys, ``train``/``eval``, ``repr``), so architectures and weights move between the two.
Buffers are raw arrays (NumPy or CuPy), not Variables: running statistics and power-iteration vectors
are updated in place and never take part in a graph.
"""
from collections import OrderedDict, namedtuple

import numpy

from gpgan.autograd import Variable, VariableNode
from gpgan.backend import device_of, get_array_module, to_device

__all__ = ["Parameter", "Module", "ForwardPreHook", "Sequential", "ModuleList", "IncompatibleKeys", "StateDictError",
           "functional_call", "count_parameters"]


class Parameter(Variable):
    """A Variable that a :class:`Module` registers as one of its parameters (``requires_grad=True``).

    Args:
        data: an array (its dtype is kept), a Variable (its value is shared, not copied), or a
            Python number/list (float32).
        requires_grad: True by default; set False to freeze the parameter.
    """

    def __init__(self, data, requires_grad=True):
        if isinstance(data, Variable):
            data = data.data
        super().__init__(data, requires_grad=requires_grad)

    def _replace_data(self, array):
        """Swap the array (device move or dtype cast), keeping this object and its requires_grad.

        The leaf node records shape and dtype, so it is rebuilt; ``.grad`` is dropped because it
        would live on the old device / in the old dtype.
        """
        requires_grad = self.requires_grad
        self.data = array
        self.grad = None
        self._node = VariableNode(array.shape, array.dtype, True, leaf=self) if requires_grad else None

    def __deepcopy__(self, memo):
        # The default copy would share the graph node, whose weak leaf reference points back at
        # this Parameter: gradients of the copy would land here. A fresh leaf instead.
        copy = Parameter(self.data.copy(), requires_grad=self.requires_grad)
        memo[id(self)] = copy
        return copy

    def __reduce__(self):
        return (Parameter, (self.numpy(), self.requires_grad))

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class ForwardPreHook:
    """Something run before every forward of the module it is registered on (spectral norm is one).

    Subclasses implement ``__call__(module, inputs)`` (``inputs``: the positional arguments of the
    call). A hook may set attributes of the module that it derives from the module's state
    (spectral norm's normalized ``weight``, from ``weight_orig`` and the ``weight_u``/``weight_v``
    buffers). Such attributes are part of the contract with :class:`Module`:

    * ``derived_attributes`` names them; they are not state, so pickling and copying a module
      leave them out;
    * ``refresh(module)`` recomputes them after the module's state changed outside a forward: a
      ``load_state_dict``, a device move or dtype cast (``Module.to``), an unpickling or a copy.

    A plain function registered with :meth:`Module.register_forward_pre_hook` is wrapped in a
    hook that derives nothing.
    """

    derived_attributes = ()

    def __call__(self, module, inputs):
        raise NotImplementedError(f"{type(self).__name__} does not implement __call__")

    def refresh(self, module):
        """Recompute the derived attributes of ``module`` from its state (nothing by default)."""


class _FunctionHook(ForwardPreHook):
    """A plain function ``fn(module, inputs)`` as a hook."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, module, inputs):
        self.fn(module, inputs)

    def __repr__(self):
        return f"_FunctionHook({self.fn!r})"


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class StateDictError(KeyError, ValueError):
    """``load_state_dict`` failed: missing/unexpected keys or shape mismatches (message names them)."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _is_array(value):
    return isinstance(value, numpy.ndarray) or (
        get_array_module(value) is not numpy and hasattr(value, "shape") and hasattr(value, "dtype"))


class Module:
    """Base class of every layer and model.

    Subclasses call ``super().__init__()`` first, then assign :class:`Parameter`\\ s, sub-modules
    and (via :meth:`register_buffer`) buffers as attributes, and implement ``forward``. Calling the
    module runs its forward pre-hooks (spectral normalization uses one), then ``forward``.

    Attributes:
        training: True in training mode (the default), False after :meth:`eval`.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # -- attribute registration -------------------------------------------------------------
    def _check_initialized(self, name):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() was called; call super().__init__() "
                f"first in {type(self).__name__}.__init__")

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._check_initialized(name)
            self._remove_from(name, except_in=self._parameters)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_initialized(name)
            self._remove_from(name, except_in=self._modules)
            self._modules[name] = value
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} to parameter {name!r} of "
                    f"{type(self).__name__}: expected a Parameter or None")
            self._parameters[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not _is_array(value):
                raise TypeError(
                    f"cannot assign {type(value).__name__} to buffer {name!r} of "
                    f"{type(self).__name__}: expected an array or None")
            self._buffers[name] = value
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} to sub-module {name!r} of "
                    f"{type(self).__name__}: expected a Module or None")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def _remove_from(self, name, except_in):
        for table in (self._parameters, self._buffers, self._modules):
            if table is not except_in:
                table.pop(name, None)
        self.__dict__.pop(name, None)
        self._non_persistent.discard(name)

    def __getattr__(self, name):
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        """Register ``param`` (a :class:`Parameter` or None) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}): expected a Parameter or None, got {type(param).__name__}")
        self._check_initialized(name)
        self._remove_from(name, except_in=self._parameters)
        self._parameters[name] = param

    def register_buffer(self, name, array, persistent=True):
        """Register a raw array (or None) as buffer ``name``; persistent buffers go into ``state_dict``."""
        if array is not None and not _is_array(array):
            raise TypeError(f"register_buffer({name!r}): expected an array or None, got {type(array).__name__}")
        self._check_initialized(name)
        self._remove_from(name, except_in=self._buffers)
        self._buffers[name] = array
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        """Register ``module`` (or None) as sub-module ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module({name!r}): expected a Module or None, got {type(module).__name__}")
        self._check_initialized(name)
        self._remove_from(name, except_in=self._modules)
        self._modules[name] = module

    def register_forward_pre_hook(self, hook):
        """``hook(module, args)`` runs before every ``forward``; returns a key for :meth:`remove_forward_pre_hook`.

        ``hook`` is a :class:`ForwardPreHook`, or any callable (wrapped in one that derives nothing).
        """
        if not isinstance(hook, ForwardPreHook):
            if not callable(hook):
                raise TypeError(f"register_forward_pre_hook: expected a ForwardPreHook or a callable "
                                f"hook(module, args), got {type(hook).__name__}")
            hook = _FunctionHook(hook)
        key = object()
        self._forward_pre_hooks[key] = hook
        return key

    def _refresh_derived_attributes(self):
        """Let this module's hooks recompute what they derive from its state (see ForwardPreHook)."""
        for hook in self._forward_pre_hooks.values():
            hook.refresh(self)

    def remove_forward_pre_hook(self, key):
        self._forward_pre_hooks.pop(key, None)

    # -- calling --------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def __call__(self, *args, **kwargs):
        for hook in self._forward_pre_hooks.values():
            hook(self, args)
        return self.forward(*args, **kwargs)

    # -- traversal ------------------------------------------------------------------------------
    def named_modules(self, prefix="", memo=None):
        """Yield ``(dotted name, module)`` for this module ("") and every descendant, each once."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self):
        for _, child in self.named_children():
            yield child

    def named_parameters(self, prefix="", recurse=True):
        """Yield ``(dotted name, Parameter)``, e.g. ``("0.weight", ...)``; a shared parameter once."""
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, module in modules:
            for name, p in module._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        """Yield ``(dotted name, array)`` for every buffer (persistent or not)."""
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, module in modules:
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), b

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes ----------------------------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode on this module and all descendants; returns ``self``."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        """Evaluation mode (``train(False)``): BatchNorm uses running statistics, spectral norm stops iterating."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        """Freeze (False) or unfreeze every parameter; returns ``self``."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self):
        """Drop every parameter's ``.grad`` (sets it to None)."""
        for p in self.parameters():
            p.grad = None

    def apply(self, fn):
        """Call ``fn(module)`` on every descendant, then on ``self`` (as torch); returns ``self``."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # -- device and dtype -----------------------------------------------------------------------
    def to(self, device=None, dtype=None):
        """Move parameters and buffers to ``device`` ("cpu"/"cuda") and/or cast floating ones to ``dtype``.

        Works in place: the Parameter objects stay the same (optimizers keep working), only their
        arrays change. ``module.to("cuda")``, ``module.to(numpy.float64)`` and
        ``module.to("cpu", numpy.float64)`` are accepted. Integer buffers keep their dtype.
        Returns ``self``.
        """
        if device is not None and not isinstance(device, str):
            device, dtype = None, device  # module.to(numpy.float64)
        if dtype is not None:
            dtype = numpy.dtype(dtype)
            if dtype.kind != "f":
                raise TypeError(f"Module.to: dtype must be a floating type, got {dtype}")

        def convert(array):
            if device is not None and device_of(array) != device:
                array = to_device(array, device)
            if dtype is not None and array.dtype.kind == "f" and array.dtype != dtype:
                array = array.astype(dtype)
            return array

        for m in self.modules():
            for name, p in m._parameters.items():
                if p is not None:
                    new = convert(p.data)
                    if new is not p.data:
                        p._replace_data(new)
            for name, b in m._buffers.items():
                if b is not None:
                    m._buffers[name] = convert(b)
            m._refresh_derived_attributes()  # spectral norm's weight, on the new device / in the new dtype
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    def double(self):
        """Cast floating parameters and buffers to float64 (for gradcheck); returns ``self``."""
        return self.to(dtype=numpy.float64)

    def float(self):
        """Cast floating parameters and buffers to float32; returns ``self``."""
        return self.to(dtype=numpy.float32)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self):
        """Parameters and persistent buffers as an ordered dict ``dotted name -> array``.

        Keys and shapes match torch's for the same architecture. The arrays are the live storage
        (as in torch): copy them for a snapshot that later training must not change.
        """
        out = OrderedDict()
        for mod_name, module in self.named_modules():
            for name, p in module._parameters.items():
                if p is not None:
                    out[f"{mod_name}.{name}" if mod_name else name] = p.data
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    out[f"{mod_name}.{name}" if mod_name else name] = b
        return out

    def _state_slots(self):
        """``dotted name -> (module, attribute name, kind)`` for everything ``state_dict`` holds."""
        slots = OrderedDict()
        for mod_name, module in self.named_modules():
            for name, p in module._parameters.items():
                if p is not None:
                    slots[f"{mod_name}.{name}" if mod_name else name] = (module, name, "parameter")
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    slots[f"{mod_name}.{name}" if mod_name else name] = (module, name, "buffer")
        return slots

    def load_state_dict(self, state_dict, strict=True):
        """Copy arrays from ``state_dict`` into this module's parameters and buffers, in place.

        Values are cast to each entry's dtype and moved to its device. Every shape is checked
        before anything is written, so a failed load changes nothing.

        Args:
            state_dict: mapping ``dotted name -> array`` (NumPy, CuPy, or Variable).
            strict: when True, missing and unexpected keys are errors; when False they are
                returned and skipped (shape mismatches are always errors).

        Returns:
            ``IncompatibleKeys(missing_keys, unexpected_keys)``.

        Raises:
            StateDictError (a KeyError and a ValueError): naming the missing and unexpected keys
            (strict) and each entry whose shape differs, with both shapes.
        """
        slots = self._state_slots()
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        problems = []
        if strict and (missing or unexpected):
            if missing:
                problems.append("missing keys: " + ", ".join(repr(k) for k in missing))
            if unexpected:
                problems.append("unexpected keys: " + ", ".join(repr(k) for k in unexpected))
        mismatched = []
        values = {}
        for key, (module, name, kind) in slots.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if isinstance(value, Variable):
                value = value.data
            if not _is_array(value):
                value = numpy.asarray(value)
            current = module._parameters[name].data if kind == "parameter" else module._buffers[name]
            if tuple(value.shape) != tuple(current.shape):
                mismatched.append(f"{key!r}: checkpoint shape {tuple(value.shape)}, "
                                  f"model shape {tuple(current.shape)}")
            values[key] = (current, value)
        if mismatched:
            problems.append("shape mismatch for " + ", ".join(mismatched))
        if problems:
            raise StateDictError(f"load_state_dict into {type(self).__name__} failed: " + "; ".join(problems))
        for key, (current, value) in values.items():
            value = to_device(value, device_of(current))
            current[...] = value.astype(current.dtype, copy=False)
        for module in self.modules():
            module._refresh_derived_attributes()
        return IncompatibleKeys(missing, unexpected)

    # -- copying and pickling -----------------------------------------------------------------
    def __getstate__(self):
        # Attributes derived by hooks (spectral norm's normalized weight, a graph output) are not
        # state: they are dropped here and recomputed by __setstate__.
        state = self.__dict__.copy()
        for hook in self._forward_pre_hooks.values():
            for name in hook.derived_attributes:
                state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._refresh_derived_attributes()

    # -- printing -------------------------------------------------------------------------------
    def extra_repr(self):
        """The text inside this module's parentheses in ``repr`` (layer settings)."""
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines.extend(extra.split("\n"))
        for name, child in self._modules.items():
            child_repr = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {child_repr}")
        if not self._modules:
            return f"{type(self).__name__}({extra})"
        body = "\n  ".join(lines)
        return f"{type(self).__name__}(\n  {body}\n)"


class _ModuleSequence(Module):
    """Sub-modules registered as "0", "1", ... in order: ``append``, ``extend``, ``len``,
    iteration, indexing (negative too) and slicing; shared by Sequential and ModuleList."""

    def append(self, module):
        """Register ``module`` under the next number; returns ``self``."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        """``append`` each of ``modules``; returns ``self``."""
        for m in modules:
            self.append(m)
        return self

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._from_items(list(self._modules.items())[index])
        return list(self._modules.values())[index]

    def _from_items(self, items):
        """A new container of this type sharing the modules of ``items`` (name, module pairs)."""
        raise NotImplementedError


class Sequential(_ModuleSequence):
    """Modules applied one after another: ``Sequential(Linear(2, 8), ReLU(), Linear(8, 1))``.

    Also accepts an ``OrderedDict`` of named modules. Children are named "0", "1", ... (as torch),
    so ``state_dict`` keys are e.g. ``"0.weight"``. Supports ``len``, iteration, indexing and
    slicing (a slice is a new Sequential sharing the modules under their names), :meth:`append`
    and :meth:`extend`.
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(str(name), m)
        else:
            for i, m in enumerate(modules):
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a Module")
                self.add_module(str(i), m)

    def _from_items(self, items):
        return Sequential(OrderedDict(items))

    def forward(self, x):
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            slope = _fused_rectifier(modules[i], modules[i + 1] if i + 1 < len(modules) else None)
            if slope is None:
                x = modules[i](x)
                i += 1
            else:
                # A Linear and the ReLU or LeakyReLU after it as one node: oneDNN adds the bias and
                # rectifies in the product's pass over its output, and the graph has one node less.
                x = modules[i](x, negative_slope=slope)
                i += 2
        return x


def _fused_rectifier(module, after):
    """The slope for ``module`` to compute the activation ``after`` too (``module.forward(x,
    negative_slope=slope)``), or None: the pair must be a Linear (``fuses_rectifier``) and a ReLU
    or LeakyReLU (``rectifier_slope``), each running its own forward."""
    fuses = getattr(module, "fuses_rectifier", None)
    slope_of = getattr(after, "rectifier_slope", None)
    if fuses is None or slope_of is None or not fuses():
        return None
    return slope_of()


class ModuleList(_ModuleSequence):
    """A list of sub-modules, registered as "0", "1", ... (no forward of its own); a slice is a
    new ModuleList of the same modules, numbered from "0"."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def _from_items(self, items):
        return ModuleList(m for _, m in items)


def count_parameters(module, trainable_only=False):
    """Number of scalar parameters of ``module`` (shared parameters counted once)."""
    return int(sum(p.size for p in module.parameters() if p.requires_grad or not trainable_only))


def functional_call(module, params, *args, **kwargs):
    """Call ``module(*args, **kwargs)`` with some parameters temporarily replaced by ``params``.

    ``params`` maps dotted parameter names (as in ``named_parameters``) to Variables; the module's
    own Parameters are restored afterwards, even on error. This lets ``gradcheck`` differentiate a
    module with respect to its weights::

        names = [n for n, _ in model.named_parameters()]
        fn = lambda x, *ws: functional_call(model, dict(zip(names, ws)), x)
    """
    owners = dict(module.named_modules())
    saved = []
    try:
        for key, value in params.items():
            mod_name, _, name = key.rpartition(".")
            owner = owners.get(mod_name)
            if owner is None or name not in owner._parameters:
                raise KeyError(f"functional_call: {type(module).__name__} has no parameter {key!r}")
            saved.append((owner, name, owner._parameters[name]))
            # Bypass __setattr__: the replacement is a plain Variable, not a Parameter.
            owner._parameters[name] = value
        return module(*args, **kwargs)
    finally:
        for owner, name, original in reversed(saved):
            owner._parameters[name] = original
