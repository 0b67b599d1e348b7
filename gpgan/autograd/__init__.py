"""gpgan's reverse-mode autodiff engine, whose backward pass is itself differentiable.

Owns the graph (Variables, function nodes), its traversal, the recording mode and the
finite-difference checks. It knows no operation: the differentiable functions, and the
operators ``+ - * @ ...`` on Variables, live one layer up in :mod:`gpgan.functions`.

Public names: :class:`Variable`, :func:`grad`, :func:`backward`, :func:`no_grad`,
:func:`enable_grad`, :class:`FunctionNode`, :data:`STRUCTURAL_ZERO`, :func:`gradcheck`,
:func:`gradgradcheck`.
"""
from gpgan.autograd.check import gradcheck, gradgradcheck
from gpgan.autograd.engine import backward, grad
from gpgan.autograd.function import STRUCTURAL_ZERO, FirstOrderOnly, FunctionNode, first_order_only
from gpgan.autograd.mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from gpgan.autograd.variable import Variable, VariableNode, as_array

__all__ = [
    "Variable", "VariableNode", "FunctionNode", "STRUCTURAL_ZERO", "FirstOrderOnly", "first_order_only", "as_array",
    "backward", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "gradcheck", "gradgradcheck",
]
