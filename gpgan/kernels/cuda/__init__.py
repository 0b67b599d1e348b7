"""The CUDA-specific kernels: products through cuBLAS itself (:mod:`.cublas`), which a CUDA-graph
capture allows. Reached through :mod:`gpgan.kernels`; CuPy is imported only when a CuPy array
asks."""
