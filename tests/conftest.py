import numpy as np
import pytest

from gpgan.backend import cupy_available

_HAS_CUDA = None


def _has_cuda():
    global _HAS_CUDA
    if _HAS_CUDA is None:
        _HAS_CUDA = cupy_available()
    return _HAS_CUDA


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not _has_cuda():
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
