"""CUDA graphs: cuBLAS products that can be captured, host numbers and host effects around a
captured step. The host-side rules run everywhere; the rest is marked ``cuda``."""
import numpy as np
import pytest

from gpgan.backend.graph import CapturedStep, host_effect, host_number


def test_outside_a_capture_host_numbers_are_plain_scalars_and_effects_just_run():
    calls = []
    value = host_effect(lambda: calls.append(1) or host_number(0.1, np.float32))
    assert calls == [1]
    assert type(value) is np.float32 and value == np.float32(0.1)


def _cupy():
    import cupy

    return cupy


LAYOUTS = {
    "plain": lambda xp, a, b: (a, b),
    "a transposed": lambda xp, a, b: (xp.ascontiguousarray(a.T).T, b),
    "b transposed": lambda xp, a, b: (a, xp.ascontiguousarray(b.T).T),
    "both transposed": lambda xp, a, b: (xp.ascontiguousarray(a.T).T, xp.ascontiguousarray(b.T).T),
    "strided rows": lambda xp, a, b: (xp.concatenate([a, a], axis=1)[:, :a.shape[1]], b),
    "a column": lambda xp, a, b: (a[:, :1], b[:1]),
}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_cublas_matmul_matches_numpy(layout, dtype, rng):
    cupy = _cupy()
    from gpgan.kernels.cuda.cublas import matmul

    a_host, b_host = rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal((5, 3)).astype(dtype)
    a, b = LAYOUTS[layout](cupy, cupy.asarray(a_host), cupy.asarray(b_host))
    expected = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    out = matmul(a, b)
    assert out.shape == expected.shape and out.dtype == dtype
    np.testing.assert_allclose(cupy.asnumpy(out), expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", [((4, 7, 5), (4, 5, 3)), ((7, 5), (4, 5, 3)), ((4, 7, 5), (5, 3)),
                                    ((1, 7, 5), (4, 5, 3)), ((5,), (5, 3)), ((7, 5), (5,)), ((5,), (5,)),
                                    ((5,), (4, 5, 3)), ((4, 7, 5), (5,))])
def test_cublas_batched_matmul_matches_numpy(shapes, rng):
    cupy = _cupy()
    from gpgan.kernels.cuda.cublas import matmul

    a, b = (rng.standard_normal(s) for s in shapes)
    out = matmul(cupy.asarray(a), cupy.asarray(b))
    assert out.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(cupy.asnumpy(out), np.matmul(a, b), rtol=1e-12)


@pytest.mark.cuda
def test_captured_step_replays_products_with_new_inputs_and_host_numbers(rng):
    """A step with a cuBLAS product, a host effect (a counter) and a host number (a rate that
    changes every step): each replay sees the new input and the new rate, as the eager step does."""
    cupy = _cupy()
    from gpgan.kernels import matmul

    w = cupy.asarray(rng.standard_normal((4, 3)))
    x = cupy.asarray(rng.standard_normal((5, 4)))
    state = {"count": 0}

    def advance():
        state["count"] += 1
        return host_number(1.0 / state["count"], np.float64)

    def step(x):
        # A block of the table's size, written and freed before the first host number: the table
        # must not be that block, or this write would overwrite the uploaded numbers in a replay.
        scratch = cupy.full(1024, 7.0)
        scratch += 1
        del scratch
        rate = host_effect(advance)
        w[...] -= rate * matmul(x.T, matmul(x, w))  # in place: the graph reads and writes w
        return (w * w).sum()

    w_start, x_start = cupy.asnumpy(w), cupy.asnumpy(x)
    x_host = [rng.standard_normal((5, 4)) for _ in range(4)]
    captured = CapturedStep(step)
    captured.rehearse(x)  # eager first, as the training step does
    x[...] = cupy.asarray(x_host[0])
    captured.capture(x)
    for host in x_host[1:]:
        x[...] = cupy.asarray(host)
        result = captured.replay()
    w_ref = w_start.copy()
    for k, xk in enumerate([x_start] + x_host, start=1):
        w_ref -= (1.0 / k) * (xk.T @ (xk @ w_ref))
    assert state["count"] == 5
    np.testing.assert_allclose(cupy.asnumpy(w), w_ref, rtol=1e-12)
    assert float(result) == pytest.approx(float((w_ref * w_ref).sum()), rel=1e-12)


def test_sums_by_index_adds_repeated_indices_in_order():
    """The portable bilinear adjoint's scatter: float64 sums per index, as a loop adds them."""
    from gpgan.kernels import sums_by_index

    index = np.array([2, 0, 2, 2, 4, 0])
    values = np.array([1.0, 2.0, 0.1, 0.2, -1.0, 3.0], np.float32)
    want = np.zeros(6)
    for i, v in zip(index, values):
        want[i] += np.float64(v)
    got = sums_by_index(np, index, values, 6)
    assert got.dtype == np.float64 and np.array_equal(got, want)


@pytest.mark.cuda
def test_sums_by_index_and_ada_matrices_can_be_captured(rng):
    """ADA's pieces that once stopped a capture (CuPy's bincount reads its largest index back, and
    CuPy's own matmul refuses a capturing stream): inside a captured step they give what they give
    eagerly, replay after replay."""
    cupy = _cupy()
    from gpgan.augment.ada import N_NORMAL, N_UNIFORM, geometric_matrix
    from gpgan.kernels import sums_by_index

    index = cupy.asarray(rng.integers(0, 50, 400))
    values = cupy.asarray(rng.standard_normal(400).astype(np.float32))
    u = cupy.asarray(rng.random((8, N_UNIFORM)))
    z = cupy.asarray(rng.standard_normal((8, N_NORMAL)))
    p = cupy.full((), 0.7)

    def step(index, values, u, z):
        return sums_by_index(cupy, index, values, 50), geometric_matrix(cupy, u, z, p, (16, 16))

    captured = CapturedStep(step)
    captured.rehearse(index, values, u, z)
    captured.capture(index, values, u, z)
    for _ in range(2):
        values[...] = cupy.asarray(rng.standard_normal(400).astype(np.float32))
        u[...] = cupy.asarray(rng.random((8, N_UNIFORM)))
        sums, G = captured.replay()
        np.testing.assert_allclose(cupy.asnumpy(sums), np.bincount(cupy.asnumpy(index), cupy.asnumpy(values),
                                                                     minlength=50), rtol=1e-12, atol=1e-12)
        want = geometric_matrix(np, cupy.asnumpy(u), cupy.asnumpy(z), np.float64(0.7), (16, 16))
        np.testing.assert_allclose(cupy.asnumpy(G), want, rtol=1e-12, atol=1e-12)


def test_lazily_penalized_steps_are_kinds_of_their_own():
    """Each kind of training step is captured once and replayed: a step whose critic updates are
    penalized at other places must be another kind, although R1's draws are empty dicts and its
    input arrays have the same shapes. (When they were one kind, a replay penalized the critic
    steps the captured step had penalized: graph and eager parted at step 3 on the H200.)"""
    import os

    from gpgan.train.build import build_components
    from gpgan.train.config import load_config
    from gpgan.train.feed import InputFeed
    from gpgan.train.step import TrainingStep

    quickstart = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "quickstart.yaml")
    config = load_config(quickstart, ["penalty.type=r1", "penalty.interval=3", "train.critic_steps=2"])
    parts = build_components(config, progress=False)
    feed = InputFeed(parts.loader, np.random.default_rng(0), parts.penalty, parts.latent_dim, 8, 8, 2)
    step = TrainingStep(parts, 2)
    inputs = [feed.next(s, "cpu") for s in range(6)]
    # critic updates 0..11, penalized every third: (j=0), (j=1), none, and again
    assert [[c.draws is not None for c in x.critic] for x in inputs[:3]] == [[True, False], [False, True],
                                                                             [False, False]]
    kinds = [step.kind(x) for x in inputs]
    assert len(set(kinds[:3])) == 3 and kinds[:3] == kinds[3:]
