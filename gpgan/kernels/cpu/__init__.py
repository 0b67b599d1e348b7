"""The CPU accelerators: array passes split over the cores (:mod:`.passes`), the Numba kernels
(:mod:`.numba_kernels`) and oneDNN (:mod:`.onednn`), and which of them takes an array
(:mod:`.select`). Reached through :mod:`gpgan.kernels`."""
