"""Image metrics by name: which there are, the keys they are logged under, and scoring generated
images' features against a :class:`~gpgan.metrics.reference.Reference`.

=======  ==========================================  ===============================================
name     keys                                        compares
=======  ==========================================  ===============================================
``fid``  ``eval/fid``                                pool3 Gaussians (the reference's mu and sigma)
``kid``  ``eval/kid``, ``eval_std/kid``              pool3 features, subsets of
                                                     ``min(1000, N_fake, N_real)`` (StyleGAN2-ADA's
                                                     cap), 100 of them
``is``   ``eval/is``, ``eval_std/is``                the generated images' logits alone, in
                                                     ``min(10, N)`` splits
``pr``   ``eval/precision``, ``eval/recall``         pool3 features, k = 3, with equal numbers on
                                                     both sides (Kynkaanniemi et al.): a fixed random
                                                     subset of the larger set, as large as the other
``dc``   ``eval/density``, ``eval/coverage``         pool3 features, k = 5 (Naeem et al.), against
                                                     the same subset as ``pr``
=======  ==========================================  ===============================================

The spreads (standard deviations over KID's subsets and IS's splits) are logged as ``eval_std/...``
rather than ``eval/..._std``: they say how noisy a score is, they are not scores, so nothing that
ranks ``eval/`` metrics (final.json's ``best``, the best checkpoint, the sweep reports) ranks them.
"""
import numpy

from gpgan.metrics.scores import (KID_SEED, density_coverage, feature_statistics, frechet_distance, inception_score,
                                  kid, precision_recall)

__all__ = ["IMAGE_METRICS", "METRIC_KEYS", "NEEDS_FEATURES", "check_metrics", "check_sample_count", "metric_keys",
           "needs_features", "score_features", "KID_MAX_SUBSET", "KID_SUBSETS", "IS_SPLITS", "PR_K", "DC_K"]

#: the image metrics, in the order they are computed and shown
IMAGE_METRICS = ("fid", "kid", "is", "pr", "dc")
#: name -> the keys of metrics.jsonl / final.json / eval_<step>.json it writes
METRIC_KEYS = {"fid": ("eval/fid",), "kid": ("eval/kid", "eval_std/kid"), "is": ("eval/is", "eval_std/is"),
               "pr": ("eval/precision", "eval/recall"), "dc": ("eval/density", "eval/coverage")}
#: the metrics that need the reference images' features, not only their mean and covariance
NEEDS_FEATURES = ("kid", "pr", "dc")
KID_MAX_SUBSET = 1000
KID_SUBSETS = 100
IS_SPLITS = 10
PR_K = 3
DC_K = 5
#: the nearest-neighbour metrics: what they are called in messages, and their k (each set they
#: draw balls around needs more than k samples)
_NEIGHBOUR_METRICS = {"pr": ("precision and recall (pr)", PR_K), "dc": ("density and coverage (dc)", DC_K)}


def check_metrics(names):
    """The metric names ``names`` (a list, or a comma-separated string such as ``"fid,kid"``) in
    :data:`IMAGE_METRICS` order, each once.

    Raises:
        ValueError: an unknown name (the accepted ones are listed), or none at all.
    """
    if isinstance(names, str):  # as typed (--metrics fid,kid): an empty or repeated item is a slip
        typed = [n.strip().lower() for n in names.split(",")]
        if "" in typed and any(typed):
            raise ValueError(f"an empty name between commas; accepted: names from {', '.join(IMAGE_METRICS)}, "
                             "separated by single commas")
        repeated = sorted({n for n in typed if n and typed.count(n) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repr(n) for n in repeated)} listed twice; accepted: each of "
                             f"{', '.join(IMAGE_METRICS)} once")
        names = [n for n in typed if n]
    names = [str(n).strip().lower() for n in names]
    unknown = [n for n in names if n not in IMAGE_METRICS]
    if unknown:
        raise ValueError(f"unknown image metric {', '.join(repr(n) for n in unknown)}; accepted: "
                         f"{', '.join(IMAGE_METRICS)} (pr: precision and recall; dc: density and coverage)")
    if not names:
        raise ValueError(f"no image metric named; accepted: {', '.join(IMAGE_METRICS)}")
    return [n for n in IMAGE_METRICS if n in names]


def metric_keys(names):
    """Every key the metrics ``names`` write, in order."""
    return [key for name in check_metrics(names) for key in METRIC_KEYS[name]]


def needs_features(names):
    """Whether any of ``names`` needs the reference's features (KID, precision/recall,
    density/coverage)."""
    return any(n in NEEDS_FEATURES for n in check_metrics(names))


def check_sample_count(names, count, unit="images"):
    """Raise ValueError("precision and recall (pr) need more than 3 images") when ``count`` samples
    (of the reference, or generated: the reference is cut to as many) are too few for one of the
    nearest-neighbour metrics among ``names``; callers put what was counted before it."""
    for name in check_metrics(names) if names else []:
        if name in _NEIGHBOUR_METRICS and count <= _NEIGHBOUR_METRICS[name][1]:
            label, k = _NEIGHBOUR_METRICS[name]
            raise ValueError(f"{label} need more than {k} {unit}")


def score_features(names, fake, reference):
    """Score generated images' Inception features against a reference.

    Args:
        names: image metric names (:func:`check_metrics`).
        fake: ``{"pool3": (N, D), "logits": (N, C)}`` of the generated images, as
            :meth:`~gpgan.metrics.InceptionV3.features` returns them.
        reference: a :class:`~gpgan.metrics.reference.Reference`, with features when a metric
            :func:`needs_features`.

    Returns:
        key -> float for every key of :func:`metric_keys`.

    Raises:
        ValueError: too few generated or reference samples for a metric (FID and KID need 2,
            precision/recall more than 3, density/coverage more than 5), or a reference without
            the features a metric needs.
    """
    names = check_metrics(names)
    pool3 = fake["pool3"]
    n = len(pool3)
    scores = {}
    if any(m in NEEDS_FEATURES for m in names) and reference.features is None:
        raise ValueError(f"KID, precision/recall and density/coverage need the reference's features; "
                         f"{reference.description} has only mu and sigma")
    if "fid" in names:
        scores["eval/fid"] = frechet_distance(*feature_statistics(pool3), reference.mu, reference.sigma)
    if "kid" in names:
        subset = min(KID_MAX_SUBSET, n, len(reference.features))
        scores["eval/kid"], scores["eval_std/kid"] = kid(pool3, reference.features, subsets=KID_SUBSETS,
                                                         subset_size=subset)
    if "is" in names:
        if fake.get("logits") is None:
            raise ValueError("the Inception Score needs the classifier's logits, and these features have none "
                             "(Inception weights without the classifier)")
        scores["eval/is"], scores["eval_std/is"] = inception_score(fake["logits"], splits=min(IS_SPLITS, n))
    if "pr" in names or "dc" in names:
        # Equal numbers on both sides: the k-th neighbour radii, and so every one of these scores,
        # depend on the set sizes (coverage of two samples of one distribution reads 1.0 against
        # a reference of a fifth the size). The same subset at every evaluation, so that scores
        # over training are comparable.
        real, fake_pool3 = reference.features, pool3
        size = min(len(real), len(fake_pool3))
        real, fake_pool3 = _subset(real, size), _subset(fake_pool3, size)
        if "pr" in names:
            scores["eval/precision"], scores["eval/recall"] = precision_recall(real, fake_pool3, k=PR_K)
        if "dc" in names:
            scores["eval/density"], scores["eval/coverage"] = density_coverage(real, fake_pool3, k=DC_K)
    return scores


def _subset(features, size):
    """A fixed random subset of ``size`` rows, in their order (all of them when there are no more)."""
    if len(features) <= size:
        return features
    return features[numpy.sort(numpy.random.RandomState(KID_SEED).choice(len(features), size, replace=False))]
