"""FID against closed forms, KID / IS / precision-recall against naive implementations of
torch-fidelity's formulas, density and coverage against a naive implementation, a hand-worked case,
their expectations for one distribution and the prdc package's numbers (a committed fixture), and
(optional) against scipy, torch-fidelity and prdc themselves."""
import importlib.util
import itertools
import math
import os

import numpy as np
import pytest

from gpgan.metrics import scores
from gpgan.metrics.scores import (density_coverage, feature_statistics, fid, frechet_distance, inception_score, kid,
                                  precision_recall)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def random_spd(rng, d, rank=None):
    a = rng.standard_normal((d, rank or d))
    return a @ a.T + (0 if rank else 0.1 * np.eye(d))


def random_rotation(rng, d):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# -- FID -----------------------------------------------------------------------------------------------
def test_frechet_distance_of_commuting_covariances(rng):
    # Same eigenvectors: tr sqrt(S1 S2) = sum sqrt(a_i b_i), so the distance is
    # |mu1 - mu2|^2 + sum (sqrt(a_i) - sqrt(b_i))^2 -- zeros (singular covariances) included.
    d = 20
    a, b = rng.uniform(0, 3, d), rng.uniform(0, 3, d)
    a[:4] = 0
    b[2:6] = 0
    q = random_rotation(rng, d)
    mu1, mu2 = rng.standard_normal(d), rng.standard_normal(d)
    want = ((mu1 - mu2) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum()
    got = frechet_distance(mu1, q @ np.diag(a) @ q.T, mu2, q @ np.diag(b) @ q.T)
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(frechet_distance(mu1, np.diag(a), mu2, np.diag(b)), want, rel_tol=1e-12)


def test_frechet_distance_of_general_2x2_covariances(rng):
    # For 2x2: tr sqrt(S1 S2) = sqrt(tr(S1 S2) + 2 sqrt(det S1 det S2)) (sqrt(l1) + sqrt(l2) squared).
    for _ in range(20):
        s1, s2 = random_spd(rng, 2), random_spd(rng, 2)
        mu1, mu2 = rng.standard_normal(2), rng.standard_normal(2)
        tr_sqrt = math.sqrt(np.trace(s1 @ s2) + 2 * math.sqrt(np.linalg.det(s1) * np.linalg.det(s2)))
        want = ((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * tr_sqrt
        assert math.isclose(frechet_distance(mu1, s1, mu2, s2), want, rel_tol=1e-10, abs_tol=1e-12)


def test_frechet_distance_is_zero_for_one_gaussian_and_symmetric(rng):
    s1, s2 = random_spd(rng, 30, rank=10), random_spd(rng, 30)
    mu1, mu2 = rng.standard_normal(30), rng.standard_normal(30)
    assert abs(frechet_distance(mu1, s1, mu1, s1)) < 1e-9
    assert math.isclose(frechet_distance(mu1, s1, mu2, s2), frechet_distance(mu2, s2, mu1, s1), rel_tol=1e-10)


def test_fid_of_gaussian_samples_approaches_the_closed_form(rng):
    d, n = 3, 200_000
    a, b = np.array([1.0, 2.0, 0.5]), np.array([0.5, 2.0, 3.0])
    q = random_rotation(rng, d)
    mu1, mu2 = np.zeros(d), np.array([1.0, -1.0, 0.5])
    x = rng.standard_normal((n, d)) * np.sqrt(a) @ q.T + mu1
    y = rng.standard_normal((n, d)) * np.sqrt(b) @ q.T + mu2
    want = ((mu1 - mu2) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum()
    assert abs(fid(x, y) - want) < 0.03  # sampling error of 200,000 samples
    assert abs(fid(x, x)) < 1e-9


def test_feature_statistics_blocks_equal_numpy(rng):
    x = rng.standard_normal((101, 7)) * 3 + 1
    mu, sigma = feature_statistics(x, batch_size=10)
    np.testing.assert_allclose(mu, x.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(sigma, np.cov(x, rowvar=False), rtol=1e-12, atol=1e-13)


def test_frechet_distance_falls_back_to_a_diagonal_offset(rng, monkeypatch):
    s1, s2 = np.diag([1.0, 4.0]), np.diag([9.0, 0.0])
    real = scores._trace_sqrt_product
    calls = []

    def fails_once(a, b):
        calls.append(a.copy())
        return float("nan") if len(calls) == 1 else real(a, b)

    monkeypatch.setattr(scores, "_trace_sqrt_product", fails_once)
    with pytest.warns(RuntimeWarning, match="singular product; adding 1e-06 to diagonal"):
        got = frechet_distance(np.zeros(2), s1, np.zeros(2), s2)
    np.testing.assert_array_equal(calls[1], s1 + 1e-6 * np.eye(2))
    want = 1 + 4 + 9 - 2 * (math.sqrt((1 + 1e-6) * (9 + 1e-6)) + math.sqrt((4 + 1e-6) * 1e-6))
    assert math.isclose(got, want, rel_tol=1e-9)


def test_frechet_distance_errors():
    with pytest.raises(ValueError, match=r"sigma2 has shape \(3, 3\), expected \(2, 2\)"):
        frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="mu2 holds NaN or infinite values"):
        frechet_distance(np.zeros(2), np.eye(2), np.array([0, np.nan]), np.eye(2))
    with pytest.raises(ValueError, match="feats_a needs at least 2 samples, got 1"):
        fid(np.zeros((1, 3)), np.zeros((5, 3)))
    with pytest.raises(ValueError, match="feats_a has 3 features per sample but feats_b has 4"):
        fid(np.zeros((5, 3)), np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"feats_b must be a 2-D array \(samples, features\)"):
        fid(np.zeros((5, 3)), np.zeros(5))


def test_frechet_distance_equals_pytorch_fids_scipy_formula(rng):
    linalg = pytest.importorskip("scipy.linalg")

    def reference(mu1, sigma1, mu2, sigma2):  # pytorch-fid's calculate_frechet_distance
        covmean = linalg.sqrtm(sigma1.dot(sigma2)).real
        diff = mu1 - mu2
        return diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean)

    for n_a, n_b in ((500, 400), (60, 40)):  # well-conditioned, and fewer samples than features
        x = rng.standard_normal((n_a, 50)) @ rng.standard_normal((50, 50)) * 0.2
        y = rng.standard_normal((n_b, 50)) @ rng.standard_normal((50, 50)) * 0.2 + 0.1
        want = reference(*feature_statistics(x), *feature_statistics(y))
        assert math.isclose(fid(x, y), want, rel_tol=1e-6)


# -- KID ---------------------------------------------------------------------------------------------
def naive_kid(a, b, subsets, m, seed):
    rng = np.random.RandomState(seed)
    values = []
    for _ in range(subsets):
        x = a[rng.choice(len(a), m, replace=False)]
        y = b[rng.choice(len(b), m, replace=False)]

        def k(u, v):
            return (u @ v / a.shape[1] + 1) ** 3

        xx = sum(k(x[i], x[j]) for i, j in itertools.permutations(range(m), 2))
        yy = sum(k(y[i], y[j]) for i, j in itertools.permutations(range(m), 2))
        xy = sum(k(x[i], y[j]) for i in range(m) for j in range(m))
        values.append((xx + yy) / (m * (m - 1)) - 2 * xy / m ** 2)
    return np.mean(values), np.std(values)


def test_kid_equals_the_naive_unbiased_mmd(rng):
    a = rng.standard_normal((30, 5))
    b = rng.standard_normal((25, 5)) + 0.5
    got = kid(a, b, subsets=4, subset_size=6, seed=7)
    want = naive_kid(a, b, 4, 6, 7)
    np.testing.assert_allclose(got, want, rtol=1e-11)
    assert kid(a, b, subsets=4, subset_size=6, seed=7) == got  # seeded: repeatable


def test_kid_is_near_zero_for_one_distribution(rng):
    a = rng.standard_normal((2000, 8))
    b = rng.standard_normal((2000, 8))
    mean, std = kid(a, b, subsets=20, subset_size=500)
    assert abs(mean) < 3 * std / math.sqrt(20) + 1e-3
    far, _ = kid(a, b + 1.0, subsets=20, subset_size=500)
    assert far > 100 * abs(mean)


def test_kid_errors(rng):
    a = rng.standard_normal((10, 3))
    with pytest.raises(ValueError, match=r"subset_size must be at least 2 and at most the smaller number of "
                                         r"samples \(10 and 10\), got 1000; pass a smaller subset_size"):
        kid(a, a)
    with pytest.raises(ValueError, match="subsets must be >= 1, got 0"):
        kid(a, a, subsets=0, subset_size=5)


# -- Inception Score ------------------------------------------------------------------------------
def naive_inception_score(logits, splits):
    n = len(logits)
    values = []
    for i in range(splits):
        part = logits[i * n // splits:(i + 1) * n // splits]
        p = np.array([[math.exp(v) for v in row] for row in part])
        p /= p.sum(axis=1, keepdims=True)
        q = p.mean(axis=0)
        kl = [sum(pi * math.log(pi / qi) for pi, qi in zip(row, q) if pi > 0) for row in p]
        values.append(math.exp(sum(kl) / len(kl)))
    return np.mean(values), np.std(values)


def test_inception_score_equals_the_naive_definition(rng):
    logits = rng.standard_normal((53, 6)) * 2
    np.testing.assert_allclose(inception_score(logits, splits=5), naive_inception_score(logits, 5), rtol=1e-12)
    perm = np.random.RandomState(11).permutation(53)
    np.testing.assert_allclose(inception_score(logits, splits=5, shuffle_seed=11),
                               naive_inception_score(logits[perm], 5), rtol=1e-12)


def test_inception_score_bounds():
    # Uniform predictions score 1; confident predictions spread evenly over C classes score C.
    assert inception_score(np.zeros((40, 7)), splits=4) == pytest.approx((1.0, 0.0))
    confident = np.full((100, 10), -1e3)
    confident[np.arange(100), np.arange(100) % 10] = 0.0
    mean, std = inception_score(confident, splits=1)
    assert mean == pytest.approx(10.0, rel=1e-9) and std == 0.0
    with pytest.raises(ValueError, match=r"splits must be between 1 and the number of samples \(3\), got 10"):
        inception_score(np.zeros((3, 4)))


# -- precision and recall ----------------------------------------------------------------------------
def naive_precision_recall(real, fake, k):
    def dist(a, b):
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))

    radius_real = np.sort(dist(real, real), axis=1)[:, k]  # index 0 is the point itself
    radius_fake = np.sort(dist(fake, fake), axis=1)[:, k]
    precision = np.mean([(dist(f[None], real)[0] <= radius_real).any() for f in fake])
    recall = np.mean([(dist(r[None], fake)[0] <= radius_fake).any() for r in real])
    return precision, recall


@pytest.mark.parametrize("batch_size", [7, 2048])
def test_precision_recall_equal_the_naive_definition(batch_size, rng):
    real = rng.standard_normal((60, 4))
    fake = rng.standard_normal((45, 4)) * 1.5 + 0.7
    got = precision_recall(real, fake, k=3, batch_size=batch_size)
    want = naive_precision_recall(real, fake, 3)
    assert got == pytest.approx(want, abs=0)
    assert 0 < got[0] < 1 and 0 < got[1] < 1
    assert precision_recall(real, fake, k=5, batch_size=batch_size) == pytest.approx(
        naive_precision_recall(real, fake, 5), abs=0)


def test_precision_recall_of_identical_sets_and_errors(rng):
    x = rng.standard_normal((20, 3))
    assert precision_recall(x, x.copy()) == (1.0, 1.0)
    with pytest.raises(ValueError, match=r"each set needs more than k=3 samples, got 20 real and 3 generated"):
        precision_recall(x, x[:3])
    with pytest.raises(ValueError, match="real_feats holds NaN or infinite values"):
        precision_recall(np.full((5, 3), np.inf), x)


# -- density and coverage ----------------------------------------------------------------------------
def naive_density_coverage(real, fake, k):
    dist = np.sqrt(((real[:, None, :] - fake[None, :, :]) ** 2).sum(axis=2))          # (real, fake)
    radius = np.sort(np.sqrt(((real[:, None, :] - real[None, :, :]) ** 2).sum(axis=2)), axis=1)[:, k]
    density = sum(sum(dist[i, j] < radius[i] for i in range(len(real))) for j in range(len(fake))) / (k * len(fake))
    coverage = np.mean([dist[i].min() < radius[i] for i in range(len(real))])
    return density, coverage


@pytest.mark.parametrize("batch_size", [7, 2048])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_density_coverage_equal_the_naive_definition(batch_size, k, rng):
    real = rng.standard_normal((60, 4))
    fake = rng.standard_normal((45, 4)) * 1.5 + 0.7
    got = density_coverage(real, fake, k=k, batch_size=batch_size)
    assert got == pytest.approx(naive_density_coverage(real, fake, k), abs=1e-15)
    assert 0 < got[0] and 0 < got[1] < 1


def test_density_coverage_by_hand_count_a_radius_as_outside():
    """Reals 0, 1, 2, 3 on a line, k = 1: every radius is 1. Generated 0.5 lies in two balls, 1.0 in
    one (it is at distance exactly 1 from 0 and 2: outside, as prdc's strict < has it), 10 in none:
    density (2 + 1 + 0) / 3 = 1. Reals 0 and 1 have a generated sample within 1, 2 and 3 do not."""
    real = np.array([[0.0], [1.0], [2.0], [3.0]])
    fake = np.array([[0.5], [1.0], [10.0]])
    assert density_coverage(real, fake, k=1) == (1.0, 0.5)


def test_density_coverage_of_one_distribution_meet_their_expectations(rng):
    """Naeem et al.'s Lemmas 1 and 2: for real and generated samples from one distribution, density
    has expectation 1 and coverage 1 - prod_{i=1..k} (N - i) / (N + M - i) (N real, M generated)."""
    n, m, k = 1500, 1000, 5
    densities, coverages = [], []
    for _ in range(3):
        d, c = density_coverage(rng.standard_normal((n, 3)), rng.standard_normal((m, 3)), k=k)
        densities.append(d)
        coverages.append(c)
    expected_coverage = 1 - np.prod([(n - i) / (n + m - i) for i in range(1, k + 1)])
    assert np.mean(densities) == pytest.approx(1.0, abs=0.03)
    assert np.mean(coverages) == pytest.approx(expected_coverage, abs=0.01)
    # Mode collapse (every generated sample near one point of high real density): about as many
    # real balls hold each generated sample, but almost no real ball holds one.
    d, c = density_coverage(rng.standard_normal((n, 3)), 0.01 * rng.standard_normal((m, 3)), k=k)
    assert 0.5 < d < 2 and c < 0.02
    # The real samples themselves: each real ball strictly holds its own centre and k - 1 others
    # (the k-th neighbour is on its edge, where rounding may tip a distance either way: the radii's
    # products and these are different BLAS calls), so about N k memberships in all.
    real = rng.standard_normal((n, 3))
    d, c = density_coverage(real, real.copy(), k=k)
    assert d == pytest.approx(1.0, abs=1e-3) and c == 1.0
    # Generated samples away from the real ones: inside no ball.
    assert density_coverage(real, rng.standard_normal((m, 3)) + 20, k=k) == (0.0, 0.0)


def test_density_coverage_equal_prdc():
    """The numbers of Naeem et al.'s prdc package (scripts/make_prdc_fixture.py wrote them), Gaussian
    features and integer-grid features whose distances often equal a radius exactly."""
    with np.load(os.path.join(FIXTURES, "prdc_reference.npz"), allow_pickle=False) as ref:
        for name in ("gauss", "grid"):
            for k, density, coverage in zip(ref["ks"], ref[f"{name}_density"], ref[f"{name}_coverage"]):
                got = density_coverage(ref[f"{name}_real"], ref[f"{name}_fake"], k=int(k), batch_size=33)
                assert got == pytest.approx((density, coverage), rel=1e-12), (name, k)


def test_density_coverage_errors(rng):
    x = rng.standard_normal((20, 3))
    with pytest.raises(ValueError, match=r"the real set needs more than k=5 samples, got 5"):
        density_coverage(x[:5], x)
    with pytest.raises(ValueError, match="real_feats has 3 features per sample but fake_feats has 2"):
        density_coverage(x, x[:, :2])
    with pytest.raises(ValueError, match="fake_feats holds NaN or infinite values"):
        density_coverage(x, np.full((4, 3), np.nan))


# -- optional: torch-fidelity itself -------------------------------------------------------------------
def _torch_fidelity(module):
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "compare_inception", os.path.join(os.path.dirname(__file__), "..", "scripts", "compare_inception.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    try:
        return torch, script.import_with_torchvision(f"torch_fidelity.{module}")
    except ImportError as exc:
        pytest.skip(f"torch-fidelity is not importable: {exc}")


def test_kid_equals_torch_fidelity(rng):
    torch, metric = _torch_fidelity("metric_kid")
    a = rng.standard_normal((300, 16)).astype(np.float32)
    b = (rng.standard_normal((250, 16)) * 1.2 + 0.1).astype(np.float32)
    out = metric.kid_features_to_metric(torch.tensor(a), torch.tensor(b), kid_subsets=10, kid_subset_size=100,
                                        verbose=False, rng_seed=2020, kid_kernel="poly", kid_kernel_poly_degree=3,
                                        kid_kernel_poly_gamma=None, kid_kernel_poly_coef0=1)
    got = kid(a, b, subsets=10, subset_size=100)
    assert got == pytest.approx((out["kernel_inception_distance_mean"], out["kernel_inception_distance_std"]),
                                rel=1e-4)


def test_inception_score_equals_torch_fidelity(rng):
    torch, metric = _torch_fidelity("metric_isc")
    logits = rng.standard_normal((200, 1008)) * 3
    out = metric.isc_features_to_metric(torch.tensor(logits), splits=10, shuffle=True, rng_seed=2020)
    got = inception_score(logits, splits=10, shuffle_seed=2020)
    assert got == pytest.approx((out["inception_score_mean"], out["inception_score_std"]), rel=1e-10)


def test_precision_recall_equal_torch_fidelity(rng):
    torch, metric = _torch_fidelity("metric_prc")
    real = rng.standard_normal((300, 32))
    fake = rng.standard_normal((250, 32)) * 1.3 + 0.2
    # torch-fidelity's convention: features_1 generated, features_2 real.
    want = metric.calculate_precision_recall_full(torch.tensor(fake), torch.tensor(real), 3, 10000)
    assert precision_recall(real, fake, k=3, batch_size=64) == pytest.approx(want, rel=1e-7)  # torch: float32 mean


def test_density_coverage_equal_prdc_itself(rng):
    prdc = pytest.importorskip("prdc")
    real = rng.standard_normal((300, 32))
    fake = rng.standard_normal((250, 32)) * 1.3 + 0.2
    want = prdc.compute_prdc(real, fake, 5)
    assert density_coverage(real, fake, k=5, batch_size=64) == pytest.approx((want["density"], want["coverage"]),
                                                                             rel=1e-12)
