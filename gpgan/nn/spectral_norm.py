"""Spectral normalization (Miyato et al. 2018, "Spectral Normalization for GANs"), as torch's hook.

``spectral_norm(layer)`` replaces the layer's ``weight`` parameter by ``weight_orig`` and, before
every forward, sets ``layer.weight = weight_orig / sigma``, where ``sigma`` estimates the largest
singular value of ``weight_orig`` reshaped to a matrix (out, -1):

* in training mode, ``n_power_iterations`` steps of the power iteration update the persistent
  buffers ``weight_u`` (out,) and ``weight_v`` (in,) in place, outside the graph
  (``v = normalize(W^T u)``, ``u = normalize(W v)``); eval mode does no step;
* ``sigma = u^T W v`` is then computed with differentiable functions and u, v as constants, so
  the gradient flows through sigma (the ``-(u v^T) <W, G>/sigma^2`` term of the paper), and so does
  the double backward a gradient penalty on the critic needs.
"""
import gpgan.functions as F
from gpgan.autograd import Variable, no_grad
from gpgan.backend import device_of, get_array_module, get_rng, to_device
from gpgan.kernels import matmul
from gpgan.nn.module import ForwardPreHook, Module, Parameter

__all__ = ["spectral_norm", "remove_spectral_norm", "SpectralNorm"]


def _normalize(xp, vec, eps):
    return vec / xp.maximum(xp.sqrt((vec * vec).sum()), eps)


class SpectralNorm(ForwardPreHook):
    """The forward pre-hook that spectral_norm installs (one per normalized parameter).

    Derives the module's ``<name>`` (``<name>_orig / sigma``) before every forward; its
    ``derived_attributes`` are ``(name,)``.
    """

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        if n_power_iterations < 1:
            raise ValueError(f"spectral_norm: n_power_iterations must be >= 1, got {n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps
        self.derived_attributes = (name,)  # recomputed, so not copied or pickled with the module

    def _matrix_array(self, w):
        """The raw weight array reshaped to (size of dim ``dim``, -1)."""
        xp = get_array_module(w)
        if self.dim != 0:
            w = xp.moveaxis(w, self.dim, 0)
        return w.reshape(w.shape[0], -1)

    def _matrix(self, w):
        """The weight Variable reshaped to (size of dim ``dim``, -1), differentiably."""
        if self.dim != 0:
            axes = [self.dim] + [d for d in range(w.ndim) if d != self.dim]
            w = F.transpose(w, axes)
        return F.reshape(w, (w.shape[0], -1))

    def power_iteration(self, module):
        """``n_power_iterations`` steps on the buffers ``<name>_u`` / ``<name>_v``, in place."""
        w = self._matrix_array(getattr(module, self.name + "_orig").data)
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        xp = get_array_module(w)
        for _ in range(self.n_power_iterations):
            # kernels.matmul: CuPy's own matmul refuses a stream being captured as a CUDA graph
            v[...] = _normalize(xp, matmul(w.T, u), self.eps)
            u[...] = _normalize(xp, matmul(w, v), self.eps)

    def compute_weight(self, module):
        """``W / sigma`` with ``sigma = u^T W v`` (u, v constants), as a differentiable Variable."""
        weight = getattr(module, self.name + "_orig")
        # Copies: the next training forward updates the buffers in place, and a graph built now
        # (e.g. D(real), then D(fake), then one backward) must keep the u, v it was built with.
        u = Variable(getattr(module, self.name + "_u").copy())
        v = Variable(getattr(module, self.name + "_v").copy())
        sigma = F.sum(u * F.matmul(self._matrix(weight), v))
        return weight / sigma

    def __call__(self, module, args):
        if module.training:
            with no_grad():
                self.power_iteration(module)
        object.__setattr__(module, self.name, self.compute_weight(module))

    def refresh(self, module):
        """Recompute the normalized weight after a device move, dtype cast or state load."""
        with no_grad():
            object.__setattr__(module, self.name, self.compute_weight(module))

    def sigma(self, module):
        """The current estimate of the largest singular value, as a float (no iteration)."""
        w = self._matrix_array(getattr(module, self.name + "_orig").data)
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        return float((u * matmul(w, v)).sum())


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None, rng=None):
    """Spectrally normalize ``module.<name>`` (a Linear, Conv2d or ConvTranspose2d); returns ``module``.

    Args:
        module: the layer to wrap, modified in place.
        name: the parameter to normalize.
        n_power_iterations: power-iteration steps per training-mode forward (Miyato et al. use 1).
        eps: floor of the norms in the normalization of u and v.
        dim: the output dimension of the weight; default 1 for ConvTranspose2d (weight
            (in, out, kH, kW)) and 0 otherwise, as torch.
        rng: NumPy Generator for the initial u, v (standard normal, normalized); None: global.

    After the call, ``state_dict`` holds ``<name>_orig`` (parameter), ``<name>_u`` and
    ``<name>_v`` (persistent buffers) instead of ``<name>``, as torch.nn.utils.spectral_norm.
    """
    if not isinstance(module, Module):
        raise TypeError(f"spectral_norm expects a Module, got {type(module).__name__}")
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, SpectralNorm) and hook.name == name:
            raise RuntimeError(f"spectral_norm: {type(module).__name__}.{name} is already spectrally normalized")
    weight = module._parameters.get(name)
    if weight is None:
        raise ValueError(f"spectral_norm: {type(module).__name__} has no parameter {name!r}")
    if dim is None:
        from gpgan.nn.layers import ConvTranspose2d

        dim = 1 if isinstance(module, ConvTranspose2d) else 0
    fn = SpectralNorm(name, n_power_iterations, dim, eps)
    w = fn._matrix_array(weight.data)
    xp = get_array_module(w)
    gen = get_rng(rng)
    device = device_of(w)
    u = to_device(gen.standard_normal(w.shape[0]).astype(w.dtype), device)
    v = to_device(gen.standard_normal(w.shape[1]).astype(w.dtype), device)
    del module._parameters[name]
    module.register_parameter(name + "_orig", Parameter(weight))  # the same array, not a copy
    module.register_buffer(name + "_u", _normalize(xp, u, eps))
    module.register_buffer(name + "_v", _normalize(xp, v, eps))
    module.register_forward_pre_hook(fn)
    fn.refresh(module)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undo :func:`spectral_norm`: ``<name>`` becomes a parameter holding ``W / sigma``; returns ``module``."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            with no_grad():
                weight = hook.compute_weight(module)
            module.remove_forward_pre_hook(key)
            module.__dict__.pop(name, None)
            del module._parameters[name + "_orig"]
            del module._buffers[name + "_u"]
            del module._buffers[name + "_v"]
            module.register_parameter(name, Parameter(weight.data))
            return module
    raise ValueError(f"remove_spectral_norm: {type(module).__name__}.{name} is not spectrally normalized")
