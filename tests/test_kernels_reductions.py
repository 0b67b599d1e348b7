"""gpgan.kernels.reductions: the two-stage per-channel sums that CUDA runs, checked here on NumPy
(the same code), and the dispatch that keeps NumPy's sums as they were."""
import math

import numpy as np
import pytest

from gpgan.kernels import reductions
from gpgan.kernels.cpu.passes import array_sum as cpu_array_sum


def _layouts(rng, shape, kept):
    """The same values in three memory layouts: C-contiguous, kept axis innermost (channels-last),
    and a cropped view of a padded channels-last array (what a transposed convolution returns)."""
    x = rng.standard_normal(shape)
    moved = np.ascontiguousarray(np.moveaxis(x, kept, -1))
    padded = np.zeros((moved.shape[0] + 2,) + moved.shape[1:])
    padded[1:-1] = moved
    return {"contiguous": x, "kept innermost": np.moveaxis(moved, -1, kept),
            "cropped view": np.moveaxis(padded[1:-1], -1, kept)}


@pytest.mark.parametrize("shape,kept", [((64, 16, 32, 32), 1), ((8, 3, 7, 7), 1), ((5000, 12), 1),
                                        ((3, 4096), 0), ((1024, 1), 1), ((7, 3), 1)])
def test_channel_sums_equal_the_float64_sums_in_any_layout(shape, kept):
    rng = np.random.default_rng(0)
    for layout, x in _layouts(rng, shape, kept).items():
        exact = x.sum(axis=tuple(a for a in range(x.ndim) if a != kept))
        got64 = reductions.channel_sums(x, kept)
        np.testing.assert_allclose(got64, exact, rtol=1e-12, atol=1e-12, err_msg=layout)
        got32 = reductions.channel_sums(x.astype(np.float32), kept)
        assert got32.dtype == np.float32 and got32.shape == (shape[kept],)
        # float32 partial sums of standard normals: a few ulps of the largest partial
        np.testing.assert_allclose(got32, exact, rtol=0, atol=1e-5 * math.sqrt(x.size / shape[kept]) + 1e-6,
                                   err_msg=layout)


def test_the_stages_add_chunks_of_rows_in_a_fixed_order():
    """65,536 rows: chunks of 512, then of 128 (all the remaining rows): the two stages, written out."""
    x = np.random.default_rng(1).standard_normal((65536, 4)).astype(np.float32)
    written_out = x.reshape(128, 512, 4).sum(axis=1).sum(axis=0)
    np.testing.assert_array_equal(reductions.channel_sums(x, 1), written_out)
    assert reductions.CHUNK == 512


def test_numpy_arrays_keep_the_cpu_sums():
    x = np.random.default_rng(2).standard_normal((16, 8, 32, 32)).astype(np.float32)
    for keepdims in (False, True):
        np.testing.assert_array_equal(reductions.array_sum(x, (0, 2, 3), keepdims),
                                      cpu_array_sum(x, (0, 2, 3), keepdims))
    rows = x.reshape(-1, 8)
    np.testing.assert_array_equal(reductions.column_sums(np, rows), rows.sum(axis=0))
