"""bf16 mixed precision (``train.precision: bf16``): the setting, its validation, and on CUDA the
rounding, the products and the R1 penalty's double backward against float32."""
import os

import numpy as np
import pytest

import gpgan
from gpgan.backend.precision import get_matmul_precision, matmul_precision
from gpgan.losses.penalties import R1
from gpgan.models import make_model
from gpgan.schema import ConfigError
from gpgan.train.config import load_config

QUICKSTART = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "quickstart.yaml")


def test_matmul_precision_is_scoped_and_checked():
    assert get_matmul_precision() == "float32"
    with matmul_precision("bf16"):
        assert get_matmul_precision() == "bf16"
        with matmul_precision("float32"):
            assert get_matmul_precision() == "float32"
        assert get_matmul_precision() == "bf16"
    assert get_matmul_precision() == "float32"
    with pytest.raises(ValueError, match="not one of float32, bf16"):
        with matmul_precision("fp16"):
            pass


def test_cpu_products_stay_float32_under_bf16():
    """The CPU trains in float32: the setting changes no CPU product, bit for bit."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((33, 70), dtype=np.float32), rng.standard_normal((70, 9), dtype=np.float32)
    plain = (gpgan.Variable(a) @ gpgan.Variable(b)).data
    with matmul_precision("bf16"):
        under = (gpgan.Variable(a) @ gpgan.Variable(b)).data
    np.testing.assert_array_equal(under, plain)


def test_bf16_on_the_cpu_is_refused_with_what_is_accepted():
    with pytest.raises(ConfigError, match=r"train.precision 'bf16' runs on CUDA only, but device is 'cpu'; use "
                                          r"--device cuda, or train.precision: float32"):
        load_config(QUICKSTART, overrides=["train.precision=bf16"])
    with pytest.raises(ConfigError, match=r"train.precision: got 'fp16'.*accepted: one of 'float32', 'bf16'"):
        load_config(QUICKSTART, overrides=["train.precision=fp16"])
    assert load_config(QUICKSTART, overrides=["train.precision=bf16", "device=cuda"])["train"]["precision"] == "bf16"


# -- CUDA --------------------------------------------------------------------------------------

def bf16_reference(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even, NaN quiet: in NumPy integers."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_values(bits):
    """The float32 values of bfloat16 ``bits``."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)


def test_bf16_reference_rounds_to_nearest_even():
    """The reference itself, on hand-made cases: ties go to the even bf16 neighbour."""
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)  # bf16's spacing at 1
    cases = np.array([one, one + ulp / 2, one + ulp * 1.5, one + ulp / 4, one + ulp * 3 / 4, -2.5, np.inf, -np.inf,
                      3.4e38, 1e-40], np.float32)
    got = bf16_values(bf16_reference(cases))
    np.testing.assert_array_equal(got[:5], [1.0, 1.0, 1.0 + 2 * ulp, 1.0, 1.0 + ulp])
    assert got[5] == -2.5 and got[6] == np.inf and got[7] == -np.inf
    assert np.isinf(got[8])  # past halfway from bf16's largest finite value (3.39e38) to infinity
    assert got[9] == np.float32(2.0 ** -133)  # a subnormal rounds to its nearest bf16 subnormal
    assert np.isnan(bf16_values(bf16_reference(np.float32(np.nan))))


@pytest.mark.cuda
def test_cuda_rounding_matches_the_reference_bit_for_bit():
    import cupy

    from gpgan.kernels.cuda.cublas import to_bf16

    rng = np.random.default_rng(0)
    x = np.concatenate([(rng.standard_normal(100_000) * 10.0 ** rng.integers(-30, 30, 100_000)).astype(np.float32),
                        rng.integers(0, 2 ** 32, 10_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)])
    got = cupy.asnumpy(to_bf16(cupy.asarray(x)))
    np.testing.assert_array_equal(got, bf16_reference(x))
    strided = cupy.asarray(x[:20000].reshape(100, 200)).T  # a transposed view rounds the same values
    np.testing.assert_array_equal(cupy.asnumpy(to_bf16(strided)), bf16_reference(x[:20000].reshape(100, 200).T))


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", [((64, 300), (300, 129)), ((5, 31, 70), (5, 70, 9)), ((1, 31, 70), (4, 70, 9)),
                                    ((7, 40), (3, 40, 11))])
@pytest.mark.parametrize("transposed", [False, True])
def test_cuda_bf16_product_is_the_exact_product_of_rounded_operands(shapes, transposed):
    """bf16 operands, float32 accumulation: the float64 product of the rounded operands to float32
    accuracy, and the float32 product to bf16's (about 2**-8 relative)."""
    import cupy

    from gpgan.kernels import matmul

    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    da, db = cupy.asarray(a), cupy.asarray(b)
    if transposed:  # transposed views, as the backward's products see them
        da = cupy.ascontiguousarray(da.swapaxes(-1, -2)).swapaxes(-1, -2)
        db = cupy.ascontiguousarray(db.swapaxes(-1, -2)).swapaxes(-1, -2)
    with matmul_precision("bf16"):
        got = cupy.asnumpy(matmul(da, db))
    assert got.dtype == np.float32
    exact = np.matmul(bf16_values(bf16_reference(a)).astype(np.float64), bf16_values(bf16_reference(b)).astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())
    full = np.matmul(a.astype(np.float64), b.astype(np.float64))
    rel = np.linalg.norm(got - full) / np.linalg.norm(full)
    assert 1e-4 < rel < 1e-2  # bf16 is in use, and only bf16's rounding is lost


def _r1_on_dcgan(precision):
    """R1's value and the critic weights' gradient of it, r1_cifar's critic, batch 64, float32 CUDA."""
    rng = np.random.default_rng(2)
    critic = make_model("dcgan_critic", width=128, norm="none", rng=np.random.default_rng(3)).to("cuda")
    real = gpgan.Variable(rng.uniform(-1, 1, (64, 3, 32, 32)).astype(np.float32)).to("cuda").data
    penalty = R1(weight=20.0)
    with matmul_precision(precision):
        value, _, sq = penalty.evaluate(critic, real, real, {})
        params = list(critic.parameters())
        grads = gpgan.grad(value, params, allow_unused=True)  # the last bias does not move the input gradient
    return float(value.data), [g.numpy().astype(np.float64) for g in grads if g is not None]


@pytest.mark.cuda
def test_cuda_bf16_r1_is_within_one_percent_of_float32():
    """The penalty's double backward in bf16: R1 within 1% of float32 on the same batch, and its
    weight gradient (a second-order product chain) close to float32's."""
    v32, g32 = _r1_on_dcgan("float32")
    v16, g16 = _r1_on_dcgan("bf16")
    assert v32 > 0 and abs(v16 - v32) / v32 < 0.01, (v16, v32)
    num = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(g16, g32)))
    den = np.sqrt(sum(np.sum(b ** 2) for b in g32))
    assert 0 < num / den < 0.05, num / den
