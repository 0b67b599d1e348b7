"""gpgan.kernels.reductions: the chunked per-channel sums that CUDA runs, checked here on NumPy
(the same code), and the dispatch, its CuPy branch driven by a stand-in array module."""
import math
import types

import numpy as np
import pytest

from gpgan.kernels import reductions


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
def test_chunked_sums_equal_the_float64_sums_in_any_layout(shape, kept):
    rng = np.random.default_rng(0)
    for layout, x in _layouts(rng, shape, kept).items():
        exact = x.sum(axis=tuple(a for a in range(x.ndim) if a != kept))
        got64 = reductions.chunked_channel_sums(x, kept)
        np.testing.assert_allclose(got64, exact, rtol=1e-12, atol=1e-12, err_msg=layout)
        got32 = reductions.chunked_channel_sums(x.astype(np.float32), kept)
        assert got32.dtype == np.float32 and got32.shape == (shape[kept],)
        # float32 partial sums of standard normals: a few ulps of the largest partial
        np.testing.assert_allclose(got32, exact, rtol=0, atol=1e-5 * math.sqrt(x.size / shape[kept]) + 1e-6,
                                   err_msg=layout)


def test_the_stages_add_chunks_of_rows_in_a_fixed_order():
    """65,536 rows: chunks of 512, then of 128 (all the remaining rows): the two stages, written out."""
    x = np.random.default_rng(1).standard_normal((65536, 4)).astype(np.float32)
    written_out = x.reshape(128, 512, 4).sum(axis=1).sum(axis=0)
    np.testing.assert_array_equal(reductions.chunked_channel_sums(x, 1), written_out)
    assert reductions.CHUNK == 512


class StandIn(np.ndarray):
    """A NumPy array that gpgan.kernels.reductions takes for a CuPy array (see the fixture)."""


@pytest.fixture
def stand_in_module(monkeypatch):
    """Arrays of class StandIn report a module other than NumPy, with the functions CuPy shares."""
    module = types.SimpleNamespace(ascontiguousarray=np.ascontiguousarray, moveaxis=np.moveaxis)
    monkeypatch.setattr(reductions, "get_array_module", lambda x: module if isinstance(x, StandIn) else np)
    return module


def test_large_sums_of_other_array_modules_are_chunked(stand_in_module):
    x = np.random.default_rng(2).standard_normal((16, 8, 16, 16)).astype(np.float32)  # 4,096 per channel
    chunked = reductions.chunked_channel_sums(x, 1)
    assert not np.array_equal(chunked, x.sum(axis=(0, 2, 3)))  # the two orders differ in the last bits
    np.testing.assert_array_equal(reductions.array_sum(x.view(StandIn), (0, 2, 3)), chunked)
    kept_dims = reductions.array_sum(x.view(StandIn), (0, 2, 3), keepdims=True)
    assert kept_dims.shape == (1, 8, 1, 1)
    np.testing.assert_array_equal(kept_dims.reshape(8), chunked)
    rows = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).reshape(-1, 8)
    np.testing.assert_array_equal(reductions.column_sums(stand_in_module, rows.view(StandIn)),
                                  reductions.chunked_channel_sums(rows, 1))
    assert reductions.row_blocks(stand_in_module, 4096) == 1 and reductions.row_blocks(np, 4096) > 1


@pytest.mark.parametrize("case", ["few values per channel", "two kept axes", "float16", "float64 1-D"])
def test_other_sums_of_other_array_modules_are_their_own(stand_in_module, case):
    rng = np.random.default_rng(3)
    x, axes = {"few values per channel": (rng.standard_normal((4, 8, 8, 8)).astype(np.float32), (0, 2, 3)),
               "two kept axes": (rng.standard_normal((16, 8, 16, 16)).astype(np.float32), (0, 2)),
               "float16": (rng.standard_normal((16, 8, 16, 16)).astype(np.float16), (0, 2, 3)),
               "float64 1-D": (rng.standard_normal(5000), (0,))}[case]
    np.testing.assert_array_equal(reductions.array_sum(x.view(StandIn), axes), x.sum(axis=axes))
