"""gpgan: gradient-penalty GANs on a double-backward autodiff engine of its own (NumPy / CuPy)."""
__version__ = "0.1.0"

# The backend first: it sets OpenBLAS's idle spin before NumPy is loaded (gpgan.backend.blas_idle).
from gpgan import backend  # noqa: E402,F401,I001
from gpgan.autograd import Variable, backward, enable_grad, grad, no_grad  # noqa: E402
from gpgan import functions  # noqa: E402,F401  (installs Variable's operators)
from gpgan.backend import manual_seed  # noqa: E402

__all__ = ["Variable", "backward", "enable_grad", "grad", "no_grad", "functions", "manual_seed", "__version__"]
