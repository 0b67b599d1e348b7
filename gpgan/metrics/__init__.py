"""Metrics: mode coverage of 2-D toy mixtures, image quality (FID, KID, IS, precision/recall,
density/coverage), and which way each metric improves.

Image metrics take features from pytorch-fid's FID Inception-v3 (:class:`InceptionV3`, run with
gpgan's own functions) and score them in float64 NumPy (:mod:`gpgan.metrics.scores`)::

    net = InceptionV3.load()                                 # the cached weights (inception.weights_path)
    fake = net.features(gpgan.data.to_uint8(generated))      # {"pool3", "logits"} (logits: with a classifier)
    mu, sigma = dataset_statistics(net, "cifar10", root="~/data/cifar-10-batches-py")
    score = frechet_distance(*feature_statistics(fake["pool3"]), mu, sigma)

or by name, against a reference as users name it (:mod:`gpgan.metrics.images`)::

    ref = load_reference(net, "cifar10:train", cifar_root="~/data/cifar-10-batches-py", features=True)
    scores = score_features(["fid", "kid", "is"], fake, ref)   # {"eval/fid": ..., "eval/kid": ...}
"""
from gpgan.metrics.direction import direction, is_better
from gpgan.metrics.images import (IMAGE_METRICS, METRIC_KEYS, check_metrics, check_sample_count, metric_keys,
                                  needs_features, score_features)
from gpgan.metrics.inception import InceptionV3, InceptionWeightsError
from gpgan.metrics.reference import (
    Reference,
    dataset_features,
    dataset_statistics,
    features_path,
    load_reference,
    load_statistics,
    parse_reference,
    save_statistics,
    statistics_path,
)
from gpgan.metrics.scores import (density_coverage, feature_statistics, fid, frechet_distance, inception_score, kid,
                                  precision_recall)
from gpgan.metrics.toy import DEFAULT_NUM_SAMPLES, mode_metrics, nearest_modes

__all__ = [
    "DEFAULT_NUM_SAMPLES", "mode_metrics", "nearest_modes", "direction", "is_better",
    "InceptionV3", "InceptionWeightsError",
    "feature_statistics", "frechet_distance", "fid", "kid", "inception_score", "precision_recall",
    "density_coverage", "dataset_statistics", "statistics_path", "save_statistics", "load_statistics",
    "dataset_features", "features_path", "Reference", "parse_reference", "load_reference",
    "IMAGE_METRICS", "METRIC_KEYS", "check_metrics", "check_sample_count", "metric_keys", "needs_features",
    "score_features",
]
