"""gpgan: gradient-penalty GANs on a double-backward autodiff engine of its own (NumPy / CuPy).

Importing gpgan changes nothing in the process; :func:`configure_process` makes the settings its
CPU kernels run best under (BLAS idle spin and threads, host memory), and the command-line tools
and :class:`gpgan.train.Trainer` call it.
"""
__version__ = "0.1.0"

from gpgan import backend  # noqa: F401
from gpgan.autograd import Variable, backward, enable_grad, grad, no_grad
from gpgan import functions  # noqa: F401,I001  (installs Variable's operators)
from gpgan.backend import get_num_threads, manual_seed, set_num_threads
from gpgan.kernels import configure_process

__all__ = ["Variable", "backward", "enable_grad", "grad", "no_grad", "functions", "manual_seed", "configure_process",
           "get_num_threads", "set_num_threads", "__version__"]
