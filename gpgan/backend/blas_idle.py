"""OpenBLAS's idle worker threads are told to sleep soon, so that gpgan's own threads get the cores.

After each GEMM, OpenBLAS's worker threads spin on their core waiting for the next one, by default
for 2**28 CPU cycles (about a tenth of a second). A CPU training step runs GEMMs between large
copies and elementwise passes (im2col, col2im, batch normalization), and those passes split over
the cores (:mod:`gpgan.backend.threads`) only pay if no BLAS thread is spinning on the other core.
On the 2-core Xeon of the README's benchmarks, with the passes on two threads, the DCGAN R1
critic step took 142 ms with OpenBLAS's default spin and 131 ms with a spin of 2**20 cycles
(about 0.4 ms), the generator step 325 and 272 ms; with OpenBLAS spinning, two threads were no
faster than one. A shorter spin (2**4 cycles) gained nothing more on those and cost the MLP step
of the toy problems 5% (14.5 against 13.9 ms): its many small GEMMs come faster than a sleeping
worker wakes.

Where oneDNN runs the convolutions (:mod:`gpgan.backend.onednn`), the spin is cut to 2**4 cycles:
oneDNN's OpenMP threads split each convolution statically, and a BLAS worker spinning on one of
their cores stretches the whole call. In the DCGAN generator step, the transposed convolutions
took 39 and 31 ms with a 2**20 spin against 21 and 15 ms alone, and the step 295 ms against 248
with a 2**4 spin; the R1 and WGAN-GP steps did not change. The MLP toy step's large products run
on oneDNN then too, so the price above is not paid there (13.0 ms, against 13.5 with OpenBLAS and
the 2**20 spin).

OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` (the spin as a power of two of cycles, 4 to 30) once,
when it is loaded, which NumPy's import does. So this module must run before NumPy is imported:
``gpgan/backend/__init__.py`` imports it first, and ``gpgan/__init__.py`` imports the backend
first. A value the user set is kept. When NumPy was loaded before gpgan without the variable, the
spin stays long and :data:`BLAS_IDLES_BRIEFLY` is False; the thread default then stays at one.

This module imports nothing but the standard library, :mod:`gpgan.backend.core_share` (which
owns the "is BLAS loaded yet" test) and :mod:`gpgan.backend.compiled` (the oneDNN switch), which
import only the standard library, and must keep it that way.
"""
import os

from gpgan.backend.compiled import onednn
from gpgan.backend.core_share import blas_loaded

__all__ = ["TIMEOUT_ENV", "SHORT_TIMEOUT", "ONEDNN_TIMEOUT", "BLAS_IDLES_BRIEFLY"]

TIMEOUT_ENV = "OPENBLAS_THREAD_TIMEOUT"
#: 2**20 cycles (about 0.4 ms at 2.6 GHz): back-to-back small GEMMs find the workers awake, and
#: they sleep before the array passes that follow a GEMM need the cores.
SHORT_TIMEOUT = 20
#: 2**4 cycles where oneDNN's convolutions run (see the module docstring).
ONEDNN_TIMEOUT = 4
# A spin of 2**22 cycles already cost the convolution steps 3 to 4%.
_BRIEF_ENOUGH = 20


def _onednn_will_run():
    try:
        return onednn.enabled()
    except ValueError:  # a bad GPGAN_ONEDNN: reported where a convolution first asks for oneDNN
        return False


def _configure():
    """Set the short spin if NumPy (and so OpenBLAS) is not loaded yet; True when it is in effect."""
    if not blas_loaded():
        os.environ.setdefault(TIMEOUT_ENV, str(ONEDNN_TIMEOUT if _onednn_will_run() else SHORT_TIMEOUT))
    try:
        return int(os.environ.get(TIMEOUT_ENV, "")) <= _BRIEF_ENOUGH
    except ValueError:
        return False


#: True when this process's OpenBLAS was loaded with a brief idle spin (see the module docstring).
BLAS_IDLES_BRIEFLY = _configure()
