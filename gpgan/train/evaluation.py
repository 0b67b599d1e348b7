"""Image metrics of a generator: the Inception network, the reference and the metrics a run's
``eval`` section names (or gpgan-eval's options), and scoring a generator's samples with them
(or a real data set's images: :meth:`ImageMetrics.score_dataset`).

Generated images go through :func:`gpgan.data.to_uint8` before their features are taken, so they
reach the network through the same 256 levels as the reference's images.
"""
import time

import numpy

from gpgan.data import to_uint8

__all__ = ["ImageMetrics", "EvaluationStopped", "run_reference", "reference_origin", "generated_features"]


class EvaluationStopped(Exception):
    """An evaluation left off between two batches because its ``stop`` callable gave a reason
    (Ctrl-C during training): nothing of it was kept. ``reason``: what ``stop`` returned."""

    def __init__(self, reason):
        self.reason = reason
        super().__init__(f"evaluation stopped: {reason}")


def run_reference(config):
    """``(reference, cifar_root, download)`` of a run: ``eval.reference``, or when it is null the
    run's own data (``cifar10:<data.split>``, or the image folder ``data.root``); CIFAR-10 is read
    from ``data.root`` (downloaded there when ``data.download``)."""
    data = config["data"]
    spec = config["eval"]["reference"]
    if spec is None:
        spec = f"cifar10:{data['split']}" if data["name"] == "cifar10" else data["root"]
    cifar = data["name"] == "cifar10"
    return spec, data["root"] if cifar else None, bool(data["download"]) and cifar


def reference_origin(config):
    """``(key, accepted)``: the config key :func:`run_reference`'s reference comes from
    (``eval.reference``, else ``data.root``, whose folder of images or CIFAR-10 it then is) and
    what that key accepts, for the messages about it."""
    from gpgan.data.image_folder import FOLDER_ACCEPTED
    from gpgan.metrics.reference import ACCEPTED_REFERENCES

    if config["eval"]["reference"] is not None:
        return "eval.reference", ACCEPTED_REFERENCES
    return "data.root", FOLDER_ACCEPTED


def generated_features(net, batches, batch_size=50, progress=True, stop=None):
    """Inception features of a generator's output.

    Args:
        net: an :class:`~gpgan.metrics.InceptionV3`.
        batches: an iterable of generated images (B, C, H, W) in [-1, 1] (NumPy), e.g.
            :func:`gpgan.train.sampling.batches`; each is quantized with
            :func:`~gpgan.data.to_uint8` as it comes, so only uint8 images are kept.
        batch_size, progress: of the feature extraction (one progress bar over all images).
        stop: None, or a callable asked as each generated batch arrives and before each batch
            of the network: a reason to stop (any true value) raises :class:`EvaluationStopped`.
            On a CPU the network takes minutes for 5,000 images; with this a Ctrl-C
            during training stops it within one batch.

    Returns:
        ``{"pool3": (N, 2048), "logits": (N, 1008)}`` as :meth:`~gpgan.metrics.InceptionV3.features`
        (no logits from weights without the classifier).
    """
    images = numpy.concatenate([to_uint8(_finite(batch)) for batch in _until(stop, batches)])
    return net.features(images, batch_size=batch_size, progress=progress, before_batch=lambda: _check(stop))


def _finite(batch):
    """``batch``, refused when it holds NaN or infinite values: quantized, they would become
    ordinary pixels (NaN as 0) and a diverged generator would get an ordinary score."""
    if not numpy.isfinite(batch).all():
        raise ValueError("the generator produced NaN or infinite values (a diverged run?); its images cannot be "
                         "scored")
    return batch


def _until(stop, items):
    """``items``, asking ``stop`` (when given) before each: its reason raises
    :class:`EvaluationStopped`."""
    for item in items:
        _check(stop)
        yield item


def _check(stop):
    reason = stop() if stop is not None else None
    if reason:
        raise EvaluationStopped(reason)


class ImageMetrics:
    """Named image metrics against one reference, with one Inception network.

    Args:
        names: metric names (:func:`gpgan.metrics.check_metrics`).
        net: the :class:`~gpgan.metrics.InceptionV3`.
        reference: the :class:`~gpgan.metrics.Reference` (with features when KID or
            precision/recall are named), or None when it was only checked (a dry run: nothing
            can be scored).
        batch_size, progress: of the feature extraction.
        note: what the reference is and where it comes from, in words.
    """

    def __init__(self, names, net, reference, batch_size=50, progress=True, note=""):
        from gpgan.metrics import check_metrics

        self.names = check_metrics(names)
        self.net, self.reference = net, reference
        self.batch_size, self.progress, self.note = int(batch_size), progress, note
        self.last_seconds = {}  # the wall time of the last score(): see there

    @classmethod
    def build(cls, names, spec, weights=None, cifar_root=None, download=False, device="cpu", batch_size=50,
              progress=True, compute=True, is_optional=False, option="reference", accepted=None):
        """Load the Inception weights and the reference ``spec`` (see
        :func:`gpgan.metrics.parse_reference`): everything an evaluation needs, so that whatever
        is missing fails here, before any work.

        Args:
            weights: the weights file (None: ``$GPGAN_INCEPTION_WEIGHTS`` or the cache, downloaded
                once).
            cifar_root, download: where a CIFAR-10 reference is read.
            compute: False checks the reference without computing features (a dry run):
                ``reference`` is then None unless it was cached.
            is_optional: leave the Inception Score out (instead of failing) when the weights have
                no classifier (gpgan-eval's default metrics).
            option, accepted: what ``spec`` is called where it was given (``--ref``,
                ``eval.reference``) and what is accepted there (default: any reference), for
                the messages about it (:func:`~gpgan.metrics.load_reference`).

        Raises:
            InceptionWeightsError: weights missing (offline: the message says where to put them),
                not the FID network, or without the classifier while ``is`` is asked for.
            FileNotFoundError, ValueError: a reference that cannot be had, with too few images, or
                a statistics file of another shape than the network's features.
        """
        from gpgan.metrics import InceptionV3, check_metrics, check_sample_count, load_reference, needs_features
        from gpgan.metrics.inception import weights_path

        names = check_metrics(names)
        path = weights_path(weights, progress=progress)
        net = InceptionV3.load(path, device=device, progress=progress)
        left_out = ""
        if "is" in names and not net.has_classifier:
            if not is_optional:
                net.require_classifier()
            names = [n for n in names if n != "is"]
            left_out = " (the Inception Score left out: these weights have no classifier)"
        features = needs_features(names)
        reference = load_reference(net, spec, cifar_root=cifar_root, download=download, features=features,
                                   batch_size=batch_size, progress=progress, compute=compute, option=option,
                                   accepted=accepted)
        if reference is None:
            note = f"{spec}: features to be computed once before training, then cached"
        else:
            note = reference.description + ("" if compute else " (cached)")
            if reference.features is not None:
                try:
                    check_sample_count(names, len(reference.features))
                except ValueError as exc:
                    raise ValueError(f"the reference {reference.description} has {len(reference.features)} "
                                     f"images; {exc}") from None
        return cls(names, net, reference, batch_size, progress, f"{', '.join(names)} against {note}; "
                                                                f"Inception weights {path}{left_out}")

    @classmethod
    def for_run(cls, config, progress=True, compute=True):
        """The image metrics a run's config asks for (``eval``), or None when it asks for none."""
        ec = config["eval"]
        if not ec["metrics"]:
            return None
        spec, cifar_root, download = run_reference(config)
        option, accepted = reference_origin(config)
        return cls.build(ec["metrics"], spec, ec["inception_weights"], cifar_root, download, config["device"],
                         ec["batch_size"], progress, compute, option=option, accepted=accepted)

    def score(self, batches, stop=None):
        """key -> value of every metric for the generated images ``batches`` yields (see
        :func:`generated_features`, and its ``stop``). Its wall time is left in
        :attr:`last_seconds`: ``{"features": generating the images and their Inception features,
        "scores": the metrics from the features}``."""
        from gpgan.metrics import score_features

        if self.reference is None:
            raise RuntimeError("ImageMetrics: the reference was only checked (compute=False); nothing can be scored")
        started = time.perf_counter()
        fake = generated_features(self.net, batches, self.batch_size, self.progress, stop)
        _check(stop)  # the scores themselves take seconds to a minute (sqrtm, nearest neighbours)
        featured = time.perf_counter()
        scores = score_features(self.names, fake, self.reference)
        self.last_seconds = {"features": featured - started, "scores": time.perf_counter() - featured}
        return scores

    def score_dataset(self, spec, cifar_root=None, download=False, option="the images to score"):
        """Score a real data set's images against the reference, as generated images are scored
        (e.g. CIFAR-10's test images against its training images: the real-data floor).

        Args:
            spec: ``cifar10:train``, ``cifar10:test`` or a folder of images (see
                :func:`gpgan.metrics.parse_reference`); its features are computed once and
                cached as a reference's are (:func:`gpgan.metrics.load_reference`).
            cifar_root, download: where a CIFAR-10 source is read.
            option: what ``spec`` is called where it was given (``SOURCE``), for the messages
                about it.

        Returns:
            ``(source, scores)``: the source's :class:`~gpgan.metrics.Reference` (its
            ``description`` and ``features``) and key -> value of every metric.

        Raises:
            ValueError: a statistics file as ``spec`` (it holds no images), the Inception Score
                among the metrics (it rates images alone; the cached features have no logits), or
                too few images for a metric.
        """
        from gpgan.metrics import check_sample_count, load_reference, parse_reference, score_features
        from gpgan.metrics.reference import SOURCES_ACCEPTED

        if self.reference is None:
            raise RuntimeError("ImageMetrics: the reference was only checked (compute=False); nothing can be scored")
        if parse_reference(spec)[0] == "statistics":
            raise ValueError(f"{spec} is a statistics file; the images to score must be a data set (cifar10:test) "
                             "or a folder of images")
        if "is" in self.names:
            raise ValueError("the Inception Score rates images alone, not against a reference; a data set is scored "
                             "with fid, kid, pr and dc")
        source = load_reference(self.net, spec, cifar_root=cifar_root, download=download, features=True,
                                batch_size=self.batch_size, progress=self.progress, option=option,
                                accepted=SOURCES_ACCEPTED)
        try:
            check_sample_count(self.names, len(source.features))
        except ValueError as exc:
            raise ValueError(f"{source.description}: {exc}") from None
        return source, score_features(self.names, {"pool3": source.features}, self.reference)

    def provenance(self):
        """What the scores depend on, for manifest.json and eval_<step>.json."""
        return {"metrics": list(self.names), "reference": self.reference.description if self.reference else None,
                "inception_weights_id": self.net.weights_id}
