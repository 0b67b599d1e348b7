#!/usr/bin/env python3
"""Check gpgan's FID Inception against pytorch-fid's on the same (random or real) weights.

    /work/compare-venv/bin/python scripts/compare_inception.py                 # random weights
    /work/compare-venv/bin/python scripts/compare_inception.py --weights FILE  # e.g. the official .pth
    /work/compare-venv/bin/python scripts/compare_inception.py --size 64 --n 8 --dtype float64

pytorch-fid's ``InceptionV3([3])`` is built with its own code path; its weight download is
replaced by the state dict under test (random weights from ``gpgan.metrics.inception.
random_state_dict`` in the official layout, or a file read by ``torch.load``). Both networks see
the same uint8 images: pytorch-fid as its data loader gives them (``x / 255``, then its own
resize and normalization), gpgan through ``InceptionV3.features``. Printed: the largest absolute
and relative differences of pool3 and of the logits (``pool3 @ fc.weight.T``), and the exit status
is 1 when they exceed the tolerance of the dtype.

Needs torch and pytorch-fid (never dependencies of gpgan); in the comparison venv, torchvision's
C ops are skipped by ``../shared/compare/torchvision_shim.py``, which is imported when present.
"""
import argparse
import os
import sys

import numpy

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from gpgan.metrics.inception import InceptionV3, random_state_dict  # noqa: E402

# The largest relative difference (to the largest feature) accepted per dtype.
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


def import_with_torchvision(name):
    """Import the module ``name`` (pytorch-fid's or torch-fidelity's), which imports torchvision;
    when that fails on torchvision's C ops, import the comparison venv's torchvision shim first.
    Raises ImportError when it cannot be had."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise
    except Exception:  # torchvision's C ops built for another torch: RuntimeError at import
        shim = os.path.join(ROOT, "..", "shared", "compare")
        if not os.path.isfile(os.path.join(shim, "torchvision_shim.py")):
            raise ImportError(f"{name} imports torchvision, which fails here, and no torchvision_shim "
                              "was found") from None
        for loaded in [m for m in sys.modules if m.split(".")[0] in ("torchvision", name.split(".")[0])]:
            del sys.modules[loaded]
        sys.path.insert(0, shim)
        import torchvision_shim  # noqa: F401
        return importlib.import_module(name)


def import_pytorch_fid():
    """``pytorch_fid.inception`` (see :func:`import_with_torchvision`)."""
    return import_with_torchvision("pytorch_fid.inception")


def pytorch_fid_model(state_dict):
    """pytorch-fid's InceptionV3 (pool3 block) in eval mode with the weights ``state_dict`` (name ->
    array) instead of the ones it would download."""
    import torch

    fid_inception = import_pytorch_fid()
    tensors = {k: torch.as_tensor(numpy.asarray(v)) for k, v in state_dict.items()}
    original = fid_inception.load_state_dict_from_url
    fid_inception.load_state_dict_from_url = lambda *args, **kwargs: tensors
    try:
        return fid_inception.InceptionV3([3]).eval()
    finally:
        fid_inception.load_state_dict_from_url = original


def pytorch_fid_features(state_dict, images, dtype="float32", batch_size=50):
    """pool3 and bias-free logits of pytorch-fid's network with ``state_dict`` (name -> array)."""
    import torch

    model = pytorch_fid_model(state_dict)
    torch_dtype = getattr(torch, dtype)
    model = model.to(torch_dtype)
    pool3 = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = torch.as_tensor(images[start:start + batch_size]).to(torch_dtype) / 255  # ToTensor
            pool3.append(model(x)[0].reshape(x.shape[0], -1).double().numpy())
    pool3 = numpy.concatenate(pool3)
    return pool3, pool3 @ numpy.asarray(state_dict["fc.weight"], dtype=numpy.float64).T


def compare(state_dict, images, dtype="float32", batch_size=50):
    """Largest differences between gpgan and pytorch-fid: {output: (max abs, max abs / max |ref|)}."""
    ref_pool3, ref_logits = pytorch_fid_features(state_dict, images, dtype, batch_size)
    ours = InceptionV3(state_dict, dtype=dtype).features(images, batch_size=batch_size)
    out = {}
    for name, ref in (("pool3", ref_pool3), ("logits", ref_logits)):
        err = numpy.abs(ours[name] - ref).max()
        out[name] = (float(err), float(err / numpy.abs(ref).max()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="a torch.save state dict (default: random weights)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and images")
    parser.add_argument("--n", type=int, default=6, help="images")
    parser.add_argument("--size", type=int, default=32, help="image height and width before the resize to 299")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32")
    args = parser.parse_args()
    if args.weights:
        import torch

        state = {k: v.numpy() for k, v in torch.load(args.weights, map_location="cpu").items()}
    else:
        state = random_state_dict(args.seed)
    images = numpy.random.default_rng(args.seed).integers(0, 256, (args.n, 3, args.size, args.size), numpy.uint8)
    result = compare(state, images, args.dtype)
    ok = True
    for name, (err, rel) in result.items():
        print(f"{name:7s} max |gpgan - pytorch-fid| = {err:.3g} ({rel:.3g} of the largest value)")
        ok &= rel <= TOLERANCE[args.dtype]
    print(f"{'OK' if ok else 'FAILED'}: tolerance {TOLERANCE[args.dtype]:g} ({args.dtype}, {args.n} images "
          f"{args.size}x{args.size}, {'weights ' + args.weights if args.weights else 'random weights'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
