"""load_torch_state_dict: both torch.save formats (committed fixtures made by
scripts/make_torch_fixtures.py), hand-assembled streams, TorchScript archives' module trees, and
refusal of foreign pickles."""
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

from gpgan.metrics.torch_file import NotTorchFile, load_torch_state_dict
from torch_stream import (legacy_stream, op_global, op_str, op_tuple, state_dict_pickle, storage_pid, tensor,
                          write_torchscript_file)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def expected_fixture():
    """The values scripts/make_torch_fixtures.py writes, recomputed."""
    base = np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.5)
    return OrderedDict([
        ("0.weight", np.arange(54, dtype=np.float32).reshape(2, 3, 3, 3) / np.float32(8) - np.float32(3)),
        ("1.weight", np.array([1.5, 0.5], np.float32)),
        ("1.bias", np.array([-0.25, 0.75], np.float32)),
        ("1.running_mean", np.array([0.125, -2.0], np.float32)),
        ("1.running_var", np.array([4.0, 0.0625], np.float32)),
        ("1.num_batches_tracked", np.array(7, np.int64)),
        ("extra.transposed", base.T),
        ("extra.slice", base[1:]),
        ("extra.double", np.linspace(-1, 1, 5)),
        ("extra.half", np.array([1.5, -2.0, 65504.0], np.float16)),
        # bfloat16 keeps 8 significant bits: 3e38 becomes the nearest bfloat16, 0x7f62 << 16.
        ("extra.bfloat16", np.array([1.5, -2.0, np.array(0x7F620000, np.uint32).view(np.float32)], np.float32)),
        ("extra.bool", np.array([True, False, True])),
        ("extra.empty", np.zeros((0, 3), np.float32)),
    ])


@pytest.mark.parametrize("name", ["torch_state_zip.pt", "torch_state_legacy.pt"])
def test_reads_both_torch_formats(name):
    got = load_torch_state_dict(os.path.join(FIXTURES, name))
    want = expected_fixture()
    assert list(got) == list(want)  # the file's order
    for key, value in want.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)
        assert got[key].flags.c_contiguous and got[key].flags.writeable


# -- hand-assembled legacy streams ------------------------------------------------------------------
def test_legacy_storage_views_and_offsets(tmp_path):
    # Old torch pickled a view of a storage as (view_key, offset, numel) in the persistent id.
    view = storage_pid("root", 6, view=("view", 2, 3))
    whole = storage_pid("root", 6)
    payload = state_dict_pickle([("v", tensor(view, 1, (2,), (1,))), ("w", tensor(whole, 0, (2, 3), (1, 2)))])
    path = tmp_path / "views.pt"
    path.write_bytes(legacy_stream(payload, ["root"], [[0, 1, 2, 3, 4, 5]]))
    got = load_torch_state_dict(path)
    np.testing.assert_array_equal(got["v"], [3.0, 4.0])  # element 2 + 1 of the root
    np.testing.assert_array_equal(got["w"], np.arange(6, dtype=np.float32).reshape(3, 2).T)


def test_tensor_reaching_past_its_storage_is_refused(tmp_path):
    payload = state_dict_pickle([("bad", tensor(storage_pid("k", 4), 2, (3,), (1,)))])
    path = tmp_path / "bad.pt"
    path.write_bytes(legacy_stream(payload, ["k"], [[0, 1, 2, 3]]))
    with pytest.raises(ValueError, match=r"entry 'bad': a tensor of size \(3,\), stride \(1,\) and offset 2 "
                                         "reaches past its storage of 4 elements"):
        load_torch_state_dict(path)


def test_truncated_and_forged_files_fail_clearly(tmp_path):
    data = tmp_path / "x.pt"
    with open(os.path.join(FIXTURES, "torch_state_legacy.pt"), "rb") as f:
        original = f.read()
    data.write_bytes(original[:-10])
    with pytest.raises(ValueError, match="x.pt: the file ends inside storage"):
        load_torch_state_dict(data)
    stream = legacy_stream(state_dict_pickle([("t", tensor(storage_pid("k", 4), 0, (4,), (1,)))]), ["k"], [])
    stream += struct.pack("<q", 4) + b"\0" * 4  # the count matches, the bytes are missing
    data.write_bytes(stream)
    with pytest.raises(ValueError, match="the file ends inside storage 'k'"):
        load_torch_state_dict(data)
    data.write_bytes(b"\x80\x02K\x05.")  # a pickled 5: not the magic number
    with pytest.raises(NotTorchFile) as info:
        load_torch_state_dict(data)
    assert str(info.value) == (f"{data}: not a torch weights file (neither a zip archive nor torch's older pickle "
                               "stream: a pickle without torch's magic number)")
    data.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match="truncated or corrupt torch file"):
        load_torch_state_dict(data)


def test_files_that_are_not_torch_files_say_so_in_one_line(tmp_path):
    """Another kind of zip archive (a gpgan checkpoint, an .npz, renamed .pt), text, an image or an
    empty file: a NotTorchFile (a ValueError) saying so, without Python's words about pickles."""
    path = tmp_path / "w.pt"
    np.savez(tmp_path / "ckpt.npz", a=np.zeros(2), b=np.ones(3))
    (tmp_path / "ckpt.npz").rename(path)
    cases = [(None, "a zip archive of 2 records, none of them the <name>/data.pkl torch writes")]
    for content, detail in (("two", "a zip archive with 2 <name>/data.pkl records, where torch writes one"),
                            (b"hello, weights\n", "neither a zip archive nor torch's older pickle stream"),
                            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "neither a zip archive nor torch's older pickle stream"),
                            (b"", "an empty file")):
        cases.append((content, detail))
    for content, detail in cases:
        if content == "two":
            path.unlink()
            with zipfile.ZipFile(path, "w") as archive:
                archive.writestr("a/data.pkl", b"\x80\x02}q\x00.")
                archive.writestr("b/data.pkl", b"\x80\x02}q\x00.")
        elif content is not None:
            path.write_bytes(content)
        for modules in (False, True):
            with pytest.raises(NotTorchFile) as info:
                load_torch_state_dict(path, modules=modules)
            assert isinstance(info.value, ValueError)
            assert str(info.value) == f"{path}: not a torch weights file ({detail})"
            assert (str(info.value.path), info.value.detail) == (str(path), detail)


def test_a_pickle_that_is_not_a_state_dict(tmp_path):
    path = tmp_path / "list.pt"
    path.write_bytes(legacy_stream(b"\x80\x02]q\x00.", [], []))  # an empty list
    with pytest.raises(ValueError, match="holds a list, not a state dict"):
        load_torch_state_dict(path)


# -- refusal: nothing runs -----------------------------------------------------------------------
class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("container", ["legacy", "zip", "header"])
def test_a_pickle_naming_os_system_is_refused_without_running(container, tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(OrderedDict(w=_RunsACommand(marker)), protocol=2)
    assert b"system" in evil
    path = tmp_path / "evil.pt"
    if container == "legacy":
        path.write_bytes(legacy_stream(evil, [], []))
    elif container == "header":  # the very first record already
        path.write_bytes(evil)
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("evil/data.pkl", evil)
            archive.writestr("evil/byteorder", "little")
    with pytest.raises(ValueError, match=r"evil.pt: refused to unpickle \(refused global '(posix|os|nt)\.system'"):
        load_torch_state_dict(path)
    assert not marker.exists()


def test_a_foreign_class_is_refused(tmp_path):
    payload = b"\x80\x02" + op_global("torch.nn.modules.conv", "Conv2d") + b")R."
    path = tmp_path / "module.pt"
    path.write_bytes(legacy_stream(payload, [], []))
    with pytest.raises(ValueError, match="refused global 'torch.nn.modules.conv.Conv2d': a torch state dict "
                                         "may only name tensor storages"):
        load_torch_state_dict(path)


# -- TorchScript archives --------------------------------------------------------------------------
def test_a_torchscript_module_tree_gives_its_tensors_by_state_dict_name(tmp_path):
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    tree = {"__type__": ("__torch__.wrap_net", "WrapNet"),
            "net": {"layers": {"conv": {"__type__": ("__torch__.inceptionv3.___torch_mangle_2", "Conv2dLayer"),
                                        "weight": weight, "stride": 2, "padding": [0, 1]},
                               "conv_1": {"beta": np.array([0.5, -1], np.float32)}}},
            "scale": np.array([3.0], np.float32)}
    path = tmp_path / "module.pt"
    write_torchscript_file(path, tree)  # its code/ would exit the tests if it were run
    got = load_torch_state_dict(path, modules=True)
    assert list(got) == ["net.layers.conv.weight", "net.layers.conv_1.beta", "scale"]
    np.testing.assert_array_equal(got["net.layers.conv.weight"], weight)
    np.testing.assert_array_equal(got["net.layers.conv_1.beta"], [0.5, -1])
    # A state dict is expected unless modules are asked for.
    with pytest.raises(ValueError, match=r"module.pt: refused to unpickle \(refused global "
                                         r"'__torch__.wrap_net.WrapNet': a torch state dict may only name"):
        load_torch_state_dict(path)
    # A state-dict file still reads with modules=True.
    assert list(load_torch_state_dict(os.path.join(FIXTURES, "torch_state_zip.pt"), modules=True)) == \
        list(expected_fixture())


def test_a_torchscript_archive_naming_os_system_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    payload = (b"\x80\x02" + op_global("__torch__.evil", "Net") + b")\x81}(" + op_str("hook")
               + op_global("os", "system") + op_tuple(op_str(f"touch {marker}")) + b"Rub.")
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", payload)
    with pytest.raises(ValueError, match=r"refused global 'os.system': .* TorchScript archive also __torch__ "
                                         r"module classes"):
        load_torch_state_dict(path, modules=True)
    assert not marker.exists()
    # The stand-ins' state must be a dict of attribute names, and list builders take lists.
    for body in (op_global("__torch__.m", "M") + b")\x81" + op_str("state") + b"b",
                 op_global("torch.jit._pickle", "build_intlist") + op_tuple(op_str("x")) + b"R"):
        path.write_bytes(b"")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("evil/data.pkl", b"\x80\x02" + body + b".")
        with pytest.raises(ValueError, match="evil.pt: truncated or corrupt torch file"):
            load_torch_state_dict(path, modules=True)


# -- optional: against torch itself ----------------------------------------------------------------
def test_equals_torch_load(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    sd = OrderedDict((f"t{i}", torch.tensor(rng.standard_normal((3, i + 1)).astype(np.float32))) for i in range(4))
    sd["strided"] = sd["t3"].t()
    for legacy in (False, True):
        path = tmp_path / f"s{legacy}.pt"
        torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
        got = load_torch_state_dict(path)
        ref = torch.load(path)
        for key in sd:
            np.testing.assert_array_equal(got[key], ref[key].numpy())


def test_equals_a_torchscript_modules_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(2, 5))
    path = tmp_path / "script.pt"
    torch.jit.save(torch.jit.script(module), str(path))
    got = load_torch_state_dict(path, modules=True)
    ref = {k: v for k, v in module.state_dict().items()}
    assert list(got) == list(ref)
    for key in ref:
        np.testing.assert_array_equal(got[key], ref[key].numpy())
