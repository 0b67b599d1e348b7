"""Differentiable functions on Variables, each with a differentiable backward.

Owns every operation (its forward on arrays, its backward in terms of other functions) and the
checks of their arguments; stateless: parameters, layers and random state belong to
:mod:`gpgan.nn` and the caller, graph traversal to :mod:`gpgan.autograd`. Its array code is
portable NumPy / CuPy (through :func:`gpgan.backend.get_array_module`) and never branches on an
accelerator: where one can take an operation, the operation asks :mod:`gpgan.kernels` once (the
result, or None and the portable code runs). A new operation is written the same way.

Users write ``import gpgan.functions as F``. Names, argument order and keywords follow
``torch.nn.functional`` where it has the same function. Each module lists its public functions
in ``__all__``; this package re-exports them all.
"""
from gpgan.functions import _operators
from gpgan.functions.activation import *  # noqa: F401,F403
from gpgan.functions.arithmetic import *  # noqa: F401,F403
from gpgan.functions.array import *  # noqa: F401,F403
from gpgan.functions.conv import *  # noqa: F401,F403
from gpgan.functions.device import *  # noqa: F401,F403
from gpgan.functions.dropout import *  # noqa: F401,F403
from gpgan.functions.linalg import *  # noqa: F401,F403
from gpgan.functions.math import *  # noqa: F401,F403
from gpgan.functions.normalization import *  # noqa: F401,F403
from gpgan.functions.pooling import *  # noqa: F401,F403
from gpgan.functions.reduction import *  # noqa: F401,F403
from gpgan.functions.resize import *  # noqa: F401,F403
from gpgan.functions.sampling import *  # noqa: F401,F403

_operators.install()
