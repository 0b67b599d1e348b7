"""Scores of a real data set against a reference (e.g. CIFAR-10's test images against its
training images: the real-data floor of a study whose generators are scored against the training
images), as ``gpgan-eval real`` writes them and study reports read them.

The file is JSON (one object)::

    {"source": "cifar10:test (1,017 images)",      # what was scored, in words
     "reference": "cifar10:train (5,085 images)",  # what it was scored against
     "images": 1017,                               # images of the source
     "metrics": ["fid", "kid", "pr"],
     "scores": {"eval/fid": ..., "eval/kid": ..., "eval_std/kid": ..., "eval/precision": ..., "eval/recall": ...},
     "inception_weights_id": "...", "device": "cpu", "time_s": ...}

``scores`` uses the keys runs log (:data:`gpgan.metrics.images.METRIC_KEYS`), so a report finds
a run's metric and the floor's under one name.
"""
import json
import math
import os

from gpgan.files import atomic_write

__all__ = ["REQUIRED_KEYS", "write_real_scores", "read_real_scores"]

#: the keys a reader needs; the others are provenance
REQUIRED_KEYS = ("source", "reference", "images", "scores")


def write_real_scores(path, record):
    """Write ``record`` (a dict with :data:`REQUIRED_KEYS`) to ``path`` as indented JSON,
    atomically; returns the path."""
    _check(record, path)
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def _check(record, path):
    what = f"{path}: not a `gpgan-eval real` scores file"
    if not isinstance(record, dict):
        raise ValueError(f"{what} (it holds {type(record).__name__}, not an object)")
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise ValueError(f"{what}: it lacks {', '.join(repr(k) for k in missing)} (it needs "
                         f"{', '.join(REQUIRED_KEYS)})")
    for key in ("source", "reference"):
        if not isinstance(record[key], str):
            raise ValueError(f"{what}: '{key}' must be text, got {record[key]!r}")
    images = record["images"]
    if isinstance(images, bool) or not isinstance(images, int) or images < 1:
        raise ValueError(f"{what}: 'images' must be a positive whole number, got {images!r}")
    scores = record["scores"]
    if not isinstance(scores, dict) or not scores:
        raise ValueError(f"{what}: 'scores' must be a non-empty object of metric -> number")
    for key, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{what}: score {key!r} must be a finite number, got {value!r}")


def read_real_scores(path):
    """The record of a file :func:`write_real_scores` wrote, checked.

    Raises:
        ValueError: a file that cannot be read, is not JSON or lacks a required key (the message
            is one line naming the file and what is wrong).
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    _check(record, path)
    return record
