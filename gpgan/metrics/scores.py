"""Scores on Inception features (float64 NumPy): FID, KID, Inception Score, precision and recall,
density and coverage.

The definitions follow the reference code, so numbers are comparable with published ones:

* FID (Heusel et al. 2017; pytorch-fid's ``calculate_frechet_distance``): the Frechet distance
  ``|mu1 - mu2|^2 + tr(S1) + tr(S2) - 2 tr sqrt(S1 S2)`` of Gaussians fitted to the pool3
  features (covariances with ``N - 1``).
* KID (Binkowski et al. 2018; torch-fidelity, StyleGAN2-ADA): the unbiased MMD^2 with the kernel
  ``(x.y / d + 1)^3``, averaged over random subsets.
* Inception Score (Salimans et al. 2016; OpenAI's code, torch-fidelity): ``exp E_x KL(p(y|x) ||
  p(y))`` per split of the samples, over the 1008 logits.
* Precision and recall (Kynkaanniemi et al. 2019; torch-fidelity): the fraction of generated
  samples inside the union of the real samples' k-nearest-neighbour balls, and vice versa.
* Density and coverage (Naeem et al. 2020; their ``prdc`` package): how many real balls hold each
  generated sample, and the fraction of real balls that hold one.

Distances and kernels are computed in tiles of ``batch_size`` rows, so memory stays bounded
whatever the number of samples.
"""
import warnings

import numpy

__all__ = ["feature_statistics", "frechet_distance", "fid", "kid", "inception_score", "precision_recall",
           "density_coverage"]

KID_SEED = 2020  # torch-fidelity's default rng_seed


def _features(name, feats, min_rows=1):
    feats = numpy.asarray(feats, dtype=numpy.float64)
    if feats.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (samples, features), got shape {feats.shape}")
    if feats.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} samples, got {feats.shape[0]}")
    if not numpy.isfinite(feats).all():
        raise ValueError(f"{name} holds NaN or infinite values (e.g. from a generator that diverged)")
    return feats


def _same_width(a, b, names):
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{names[0]} has {a.shape[1]} features per sample but {names[1]} has {b.shape[1]}")


# -- FID ---------------------------------------------------------------------------------------------
def feature_statistics(feats, batch_size=4096):
    """Mean and covariance of features, as pytorch-fid: ``(mu (D,), sigma (D, D))`` with the unbiased
    (``N - 1``) covariance, accumulated over row blocks of ``batch_size`` (bounded memory)."""
    feats = _features("feats", feats, min_rows=2)
    n, d = feats.shape
    mu = feats.mean(axis=0)
    sigma = numpy.zeros((d, d))
    for start in range(0, n, batch_size):
        centred = feats[start:start + batch_size] - mu
        sigma += centred.T @ centred
    sigma /= n - 1
    return mu, sigma


def _trace_sqrt_product(sigma1, sigma2):
    """``tr sqrt(S1 S2)`` of symmetric positive semi-definite ``S1, S2``.

    With ``S1 = B B^T``, ``S1 S2`` has the eigenvalues of the symmetric ``B^T S2 B`` (all >= 0), so
    the trace is the sum of their square roots. ``B`` is
    the Cholesky factor, or ``V sqrt(W)`` from the eigen-decomposition when ``S1`` is singular
    (fewer samples than features), where Cholesky fails.
    """
    try:
        b = numpy.linalg.cholesky(sigma1)
    except numpy.linalg.LinAlgError:
        w, v = numpy.linalg.eigh((sigma1 + sigma1.T) / 2)
        b = v * numpy.sqrt(numpy.clip(w, 0, None))
    m = b.T @ sigma2 @ b
    eigenvalues = numpy.linalg.eigvalsh((m + m.T) / 2)
    # Eigenvalues below the rounding level of the product are zeros in disguise: their square roots
    # (1e-7 from 1e-14) would add up over a null space, so they count as 0.
    noise = len(eigenvalues) * numpy.finfo(numpy.float64).eps * max(eigenvalues.max(), 0.0)
    return float(numpy.sqrt(eigenvalues[eigenvalues > noise]).sum())


def frechet_distance(mu1, sigma1, mu2, sigma2, eps=1e-6):
    """Frechet distance between the Gaussians ``N(mu1, sigma1)`` and ``N(mu2, sigma2)``.

    Args:
        mu1, mu2: (D,) means.
        sigma1, sigma2: (D, D) covariances (symmetric positive semi-definite; singular ones, from
            fewer samples than features, are fine).
        eps: added to both diagonals when the square root fails numerically, as pytorch-fid does
            (with a warning).

    Returns:
        ``|mu1 - mu2|^2 + tr(sigma1) + tr(sigma2) - 2 tr sqrt(sigma1 sigma2)`` as a float.
    """
    mu1, mu2 = numpy.atleast_1d(numpy.asarray(mu1, numpy.float64)), numpy.atleast_1d(numpy.asarray(mu2, numpy.float64))
    sigma1 = numpy.atleast_2d(numpy.asarray(sigma1, numpy.float64))
    sigma2 = numpy.atleast_2d(numpy.asarray(sigma2, numpy.float64))
    d = mu1.shape[0]
    for name, value, shape in (("mu1", mu1, (d,)), ("mu2", mu2, (d,)), ("sigma1", sigma1, (d, d)),
                               ("sigma2", sigma2, (d, d))):
        if value.shape != shape:
            raise ValueError(f"frechet_distance: {name} has shape {value.shape}, expected {shape} for "
                             f"mu1 of shape {mu1.shape}")
        if not numpy.isfinite(value).all():
            raise ValueError(f"frechet_distance: {name} holds NaN or infinite values")
    try:
        tr_covmean = _trace_sqrt_product(sigma1, sigma2)
    except numpy.linalg.LinAlgError:
        tr_covmean = numpy.nan
    if not numpy.isfinite(tr_covmean):
        warnings.warn(f"fid calculation produces singular product; adding {eps} to diagonal of cov estimates",
                      RuntimeWarning, stacklevel=2)
        offset = numpy.eye(d) * eps
        tr_covmean = _trace_sqrt_product(sigma1 + offset, sigma2 + offset)
    diff = mu1 - mu2
    return float(diff @ diff + numpy.trace(sigma1) + numpy.trace(sigma2) - 2 * tr_covmean)


def fid(feats_a, feats_b):
    """FID between two sets of features (N_a, D) and (N_b, D) (pool3 for the standard FID)."""
    a, b = _features("feats_a", feats_a, 2), _features("feats_b", feats_b, 2)
    _same_width(a, b, ("feats_a", "feats_b"))
    return frechet_distance(*feature_statistics(a), *feature_statistics(b))


# -- KID ---------------------------------------------------------------------------------------------
def _mmd2_unbiased_cubic(x, y):
    """Unbiased MMD^2 of equal-size ``x``, ``y`` (m, D) with the kernel ``(u.v / D + 1)^3``: one Gram
    matrix of the stacked samples (a symmetric product), then its three blocks' sums."""
    m, d = x.shape
    z = numpy.concatenate([x, y])
    k = z @ z.T
    k /= d
    k += 1
    k **= 3
    kxx, kyy, kxy = k[:m, :m], k[m:, m:], k[:m, m:]
    off_diagonal = kxx.sum() - numpy.trace(kxx) + kyy.sum() - numpy.trace(kyy)
    return off_diagonal / (m * (m - 1)) - 2 * kxy.sum() / (m * m)


def kid(feats_a, feats_b, subsets=100, subset_size=1000, seed=KID_SEED):
    """Kernel Inception Distance: mean and standard deviation of the unbiased MMD^2 over subsets.

    Each of ``subsets`` rounds draws ``subset_size`` rows of ``feats_a`` and then of ``feats_b``
    without replacement from ``numpy.random.RandomState(seed)``, as torch-fidelity does (with
    ``feats_a`` its input 1, the generated samples, the numbers are the same; its default seed
    is 2020).

    Returns:
        (mean, std) floats; std is the population standard deviation over subsets. Values
        slightly below 0 are possible (the estimator is unbiased) and mean very similar sets.
    """
    a, b = _features("feats_a", feats_a), _features("feats_b", feats_b)
    _same_width(a, b, ("feats_a", "feats_b"))
    subsets, subset_size = int(subsets), int(subset_size)
    if subsets < 1:
        raise ValueError(f"kid: subsets must be >= 1, got {subsets}")
    if subset_size < 2 or subset_size > min(len(a), len(b)):
        raise ValueError(f"kid: subset_size must be at least 2 and at most the smaller number of samples "
                         f"({len(a)} and {len(b)}), got {subset_size}; pass a smaller subset_size")
    rng = numpy.random.RandomState(seed)
    mmds = numpy.empty(subsets)
    for i in range(subsets):
        x = a[rng.choice(len(a), subset_size, replace=False)]
        y = b[rng.choice(len(b), subset_size, replace=False)]
        mmds[i] = _mmd2_unbiased_cubic(x, y)
    return float(mmds.mean()), float(mmds.std())


# -- Inception Score -----------------------------------------------------------------------------------
def inception_score(logits, splits=10, shuffle_seed=None):
    """Inception Score of classifier logits (N, classes), OpenAI's definition.

    The samples are cut into ``splits`` consecutive parts (``[i*N//splits, (i+1)*N//splits)``); each
    part scores ``exp(mean_x KL(p(y|x) || mean_x p(y|x)))`` with ``p = softmax(logits)``.
    ``shuffle_seed`` permutes the samples first with ``numpy.random.RandomState(seed)``, as
    torch-fidelity does (its default 2020 reproduces its numbers); None keeps their order.

    Returns:
        (mean, std) over the splits (population standard deviation).
    """
    logits = _features("logits", logits)
    splits = int(splits)
    if splits < 1 or splits > len(logits):
        raise ValueError(f"inception_score: splits must be between 1 and the number of samples ({len(logits)}), "
                         f"got {splits}")
    if shuffle_seed is not None:
        logits = logits[numpy.random.RandomState(shuffle_seed).permutation(len(logits))]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - numpy.log(numpy.exp(shifted).sum(axis=1, keepdims=True))
    p = numpy.exp(log_p)
    n = len(logits)
    scores = []
    for i in range(splits):
        part_p, part_log_p = p[i * n // splits:(i + 1) * n // splits], log_p[i * n // splits:(i + 1) * n // splits]
        log_q = numpy.log(part_p.mean(axis=0, keepdims=True))
        scores.append(numpy.exp((part_p * (part_log_p - log_q)).sum(axis=1).mean()))
    return float(numpy.mean(scores)), float(numpy.std(scores))


# -- precision and recall ----------------------------------------------------------------------------
def _squared_distances(x, y, x_sq, y_sq):
    d = x @ y.T
    d *= -2
    d += x_sq[:, None]
    d += y_sq[None, :]
    return numpy.maximum(d, 0, out=d)  # rounding can make a distance to itself slightly negative


def _knn_radii_sq(x, k, batch_size):
    """Squared distance of each row of ``x`` to its k-th nearest neighbour in ``x`` (itself excluded:
    the (k+1)-th smallest distance, counting the zero to itself, as torch-fidelity's kthvalue)."""
    sq = (x * x).sum(axis=1)
    radii = numpy.empty(len(x))
    for i in range(0, len(x), batch_size):
        rows = slice(i, i + batch_size)
        best = None  # the k+1 smallest so far of each row, over the column tiles seen
        for j in range(0, len(x), batch_size):
            cols = slice(j, j + batch_size)
            d = _squared_distances(x[rows], x[cols], sq[rows], sq[cols])
            candidates = d if best is None else numpy.concatenate([best, d], axis=1)
            best = numpy.partition(candidates, k, axis=1)[:, :k + 1] if candidates.shape[1] > k + 1 else candidates
        radii[rows] = numpy.partition(best, k, axis=1)[:, k]
    return radii


def _fraction_inside(queries, refs, radii_sq, batch_size):
    """Fraction of ``queries`` within distance ``radius_j`` of some ``refs[j]``."""
    q_sq, r_sq = (queries * queries).sum(axis=1), (refs * refs).sum(axis=1)
    inside = numpy.zeros(len(queries), dtype=bool)
    for i in range(0, len(queries), batch_size):
        rows = slice(i, i + batch_size)
        for j in range(0, len(refs), batch_size):
            cols = slice(j, j + batch_size)
            d = _squared_distances(queries[rows], refs[cols], q_sq[rows], r_sq[cols])
            inside[rows] |= (d <= radii_sq[cols][None, :]).any(axis=1)
    return float(inside.mean())


def precision_recall(real_feats, fake_feats, k=3, batch_size=2048):
    """Improved precision and recall (Kynkaanniemi et al. 2019), as torch-fidelity computes them.

    Each sample's ball reaches its k-th nearest neighbour within its own set. Precision: the
    fraction of generated samples inside some real sample's ball (are fakes realistic?); recall:
    the fraction of real samples inside some generated sample's ball (is the real distribution
    covered?). Distances are Euclidean, taken in tiles of ``batch_size`` x ``batch_size``.

    Args:
        real_feats: (N_real, D), fake_feats: (N_fake, D), both with more than ``k`` samples.

    Returns:
        (precision, recall) floats in [0, 1].
    """
    real, fake = _features("real_feats", real_feats), _features("fake_feats", fake_feats)
    _same_width(real, fake, ("real_feats", "fake_feats"))
    k, batch_size = int(k), int(batch_size)
    if k < 1:
        raise ValueError(f"precision_recall: k must be >= 1, got {k}")
    if min(len(real), len(fake)) <= k:
        raise ValueError(f"precision_recall: each set needs more than k={k} samples, got {len(real)} real and "
                         f"{len(fake)} generated")
    if batch_size < 1:
        raise ValueError(f"precision_recall: batch_size must be >= 1, got {batch_size}")
    precision = _fraction_inside(fake, real, _knn_radii_sq(real, k, batch_size), batch_size)
    recall = _fraction_inside(real, fake, _knn_radii_sq(fake, k, batch_size), batch_size)
    return precision, recall


# -- density and coverage ----------------------------------------------------------------------------
def density_coverage(real_feats, fake_feats, k=5, batch_size=2048):
    """Density and coverage (Naeem et al. 2020), as their ``prdc`` package computes them.

    Only the real samples' balls are used (each reaches its k-th nearest neighbour among the real
    samples, itself excluded), so a few outlying samples cannot inflate them as they inflate
    precision and recall's balls. A generated sample is inside a ball when strictly closer than its
    radius (prdc's ``<``; precision and recall count the boundary, as torch-fidelity does).

    * density: the number of real balls a generated sample lies in, averaged over the generated
      samples and divided by k. About 1 when both sets come from one distribution (wherever the
      generated samples fall inside the real data, since the balls shrink where it is dense), and
      1 for the real samples themselves (but for rounding at the balls' edges); below 1 where
      generated samples stray from the real data, above where they gather where real balls
      overlap most.
    * coverage: the fraction of real samples whose ball holds at least one generated sample. For
      two equal-size sets from one distribution it approaches ``1 - 2**-k`` (0.97 for k = 5).

    Args:
        real_feats: (N_real, D) with more than ``k`` samples; fake_feats: (N_fake, D).
        k: the neighbour that sets the radii (prdc's ``nearest_k``; the paper uses 5).

    Returns:
        (density, coverage) floats: density in [0, N_real / k], coverage in [0, 1].
    """
    real, fake = _features("real_feats", real_feats), _features("fake_feats", fake_feats)
    _same_width(real, fake, ("real_feats", "fake_feats"))
    k, batch_size = int(k), int(batch_size)
    if k < 1:
        raise ValueError(f"density_coverage: k must be >= 1, got {k}")
    if len(real) <= k:
        raise ValueError(f"density_coverage: the real set needs more than k={k} samples, got {len(real)}")
    if batch_size < 1:
        raise ValueError(f"density_coverage: batch_size must be >= 1, got {batch_size}")
    radii_sq = _knn_radii_sq(real, k, batch_size)
    r_sq, f_sq = (real * real).sum(axis=1), (fake * fake).sum(axis=1)
    balls = 0                                      # (real ball, generated sample inside it) pairs
    nearest_sq = numpy.full(len(real), numpy.inf)  # each real sample's squared distance to the nearest fake
    # Real rows against generated columns, in the tiles the radii were taken in (prdc's orientation).
    for i in range(0, len(real), batch_size):
        rows = slice(i, i + batch_size)
        for j in range(0, len(fake), batch_size):
            cols = slice(j, j + batch_size)
            d = _squared_distances(real[rows], fake[cols], r_sq[rows], f_sq[cols])
            balls += int((d < radii_sq[rows][:, None]).sum())
            numpy.minimum(nearest_sq[rows], d.min(axis=1), out=nearest_sq[rows])
    return balls / (k * len(fake)), float((nearest_sq < radii_sq).mean())
