"""gpgan.checkpoint: bitwise round trips, exact RNG restore, atomic writes, no pickles, clear mismatches."""
import json
import os

import numpy as np
import pytest

import gpgan
import gpgan.backend.random as global_random
from gpgan.checkpoint import CheckpointError, load_checkpoint, read_meta, save_checkpoint, verify
from gpgan.optim import EMA, SGD, Adam, LinearDecayLR


class Tiny:
    """Stand-in for a gpgan.nn.Module: parameters, a float and an integer buffer, in-place load."""

    def __init__(self, rng, shape=(3, 2), dtype=np.float32, extra=False):
        self._params = {"fc.weight": gpgan.Variable(rng.standard_normal(shape).astype(dtype), requires_grad=True),
                        "fc.bias": gpgan.Variable(rng.standard_normal(shape[-1]).astype(dtype), requires_grad=True)}
        if extra:
            self._params["extra"] = gpgan.Variable(np.zeros(2, dtype), requires_grad=True)
        self._buffers = {"bn.running_var": rng.uniform(0.5, 2.0, size=shape[-1]).astype(dtype),
                         "bn.num_batches_tracked": np.array(0, dtype=np.int64)}

    def named_parameters(self):
        return iter(self._params.items())

    def named_buffers(self):
        return iter(self._buffers.items())

    def parameters(self):
        return list(self._params.values())

    def state_dict(self):
        out = {k: p.data for k, p in self._params.items()}
        out.update(self._buffers)
        return out

    def load_state_dict(self, state, strict=True):
        assert set(state) == set(self.state_dict())
        for key, target in self.state_dict().items():
            target[...] = state[key]


def fake_training(modules, optimizers, ema, rng, steps, start=0):
    """A few updates whose gradients depend on the parameters and on ``rng`` (so a resume must
    restore both the optimizer state and the generator to reproduce them)."""
    for step in range(start, start + steps):
        for module, opt in zip(modules, optimizers):
            for p in module.parameters():
                noise = rng.standard_normal(p.shape).astype(p.dtype)
                p.grad = gpgan.Variable(np.tanh(p.data) + noise)
            opt.step()
            running_var = module._buffers["bn.running_var"]
            running_var *= np.float32(0.9)
            running_var += np.float32(0.1) * rng.uniform(size=running_var.shape).astype(np.float32)
            module._buffers["bn.num_batches_tracked"] += 1
        ema.update(step)


def make_run(seed):
    rng = np.random.default_rng(seed)
    G, D = Tiny(rng), Tiny(rng, shape=(2, 4))
    opt_g = Adam(G.parameters(), lr=1e-2, betas=(0.5, 0.9))
    opt_d = SGD(D.parameters(), lr=1e-2, momentum=0.9)
    return rng, G, D, opt_g, opt_d, EMA(G, decay=0.9, start_step=2)


def snapshot(G, D, opt_g, opt_d, ema):
    out = {}
    for tag, m in (("G", G), ("D", D)):
        out.update({f"{tag}.{k}": np.array(v, copy=True) for k, v in m.state_dict().items()})
    for tag, obj in (("opt_g", opt_g), ("opt_d", opt_d), ("ema", ema)):
        out.update({f"{tag}.{k}": v for k, v in obj.state_dict().items()})
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def save_run(path, G, D, opt_g, opt_d, ema, rng, step):
    return save_checkpoint(path, {"generator": G, "critic": D}, {"generator": opt_g, "critic": opt_d},
                           emas={"generator": ema}, rngs={"data": rng, "global": global_random},
                           meta={"step": step, "loss": float("nan"), "note": "ünïcode"})


def load_run(path, G, D, opt_g, opt_d, ema, rng):
    return load_checkpoint(path, {"generator": G, "critic": D}, {"generator": opt_g, "critic": opt_d},
                           emas={"generator": ema}, rngs={"data": rng, "global": global_random})


# -- round trips --------------------------------------------------------------------------------
def test_round_trip_is_bitwise(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(0)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 5)
    gpgan.manual_seed(7)
    gpgan.backend.get_rng().random(3)  # move the global generator off its seed state
    path = save_run(tmp_path / "ckpt_00000005.npz", G, D, opt_g, opt_d, ema, rng, 5)
    saved = snapshot(G, D, opt_g, opt_d, ema)
    next_data = rng.random(4)
    next_global = gpgan.backend.get_rng().random(4)

    # load into a differently initialized run whose generators are elsewhere
    rng2, G2, D2, opt_g2, opt_d2, ema2 = make_run(1)
    fake_training([G2, D2], [opt_g2, opt_d2], ema2, rng2, 2)
    gpgan.manual_seed(99)
    meta = load_run(path, G2, D2, opt_g2, opt_d2, ema2, rng2)
    assert meta["step"] == 5 and np.isnan(meta["loss"]) and meta["note"] == "ünïcode"
    assert_same(snapshot(G2, D2, opt_g2, opt_d2, ema2), saved)
    np.testing.assert_array_equal(rng2.random(4), next_data)
    np.testing.assert_array_equal(gpgan.backend.get_rng().random(4), next_global)
    assert read_meta(path)["step"] == 5


def test_resume_continues_bitwise(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(3)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 8)
    uninterrupted = snapshot(G, D, opt_g, opt_d, ema)

    rng, G, D, opt_g, opt_d, ema = make_run(3)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 3)
    path = save_run(tmp_path / "ckpt.npz", G, D, opt_g, opt_d, ema, rng, 3)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 2, start=3)  # work lost in the "crash"

    rng2, G2, D2, opt_g2, opt_d2, ema2 = make_run(4)
    step = load_run(path, G2, D2, opt_g2, opt_d2, ema2, rng2)["step"]
    fake_training([G2, D2], [opt_g2, opt_d2], ema2, rng2, 8 - step, start=step)
    assert_same(snapshot(G2, D2, opt_g2, opt_d2, ema2), uninterrupted)


def test_pcg64_state_is_stored_losslessly(tmp_path):
    rng = np.random.default_rng(2 ** 100 + 12345)
    rng.random(10)
    state = rng.bit_generator.state
    assert state["state"]["state"] > 2 ** 64  # a 128-bit integer
    path = save_checkpoint(tmp_path / "c.npz", {}, {}, rngs={"r": rng, "mt": np.random.Generator(np.random.MT19937(5))})
    with np.load(path, allow_pickle=False) as z:
        doc = json.loads(z["__meta__"].tobytes().decode("utf-8"))
    assert doc["rngs"]["r"]["state"]["state"] == {"__int__": str(state["state"]["state"])}
    other = np.random.default_rng(0)
    mt = np.random.Generator(np.random.MT19937(0))
    load_checkpoint(path, {}, {}, rngs={"r": other, "mt": mt})
    assert other.bit_generator.state == state
    np.testing.assert_array_equal(mt.random(3), np.random.Generator(np.random.MT19937(5)).random(3))


def test_schedules_and_partial_loads(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(5)
    sched = LinearDecayLR(opt_g, total_steps=10)
    for _ in range(4):
        sched.step()
    path = save_checkpoint(tmp_path / "c.npz", {"generator": G, "critic": D},
                           {"generator": opt_g, "schedule": sched}, emas={"generator": ema})
    # a sampler loads only the generator and its average
    _, G2, _, opt_g2, _, ema2 = make_run(6)
    load_checkpoint(path, {"generator": G2}, {}, emas={"generator": ema2})
    np.testing.assert_array_equal(G2.state_dict()["fc.weight"], G.state_dict()["fc.weight"])
    sched2 = LinearDecayLR(opt_g2, total_steps=10)
    load_checkpoint(path, {}, {"generator": opt_g2, "schedule": sched2})
    assert sched2.last_step == 4 and opt_g2.lr == opt_g.lr


# -- atomicity ----------------------------------------------------------------------------------
def test_crash_before_replace_keeps_the_old_file(tmp_path, monkeypatch):
    rng, G, D, opt_g, opt_d, ema = make_run(8)
    path = tmp_path / "ckpt_00000001.npz"
    save_run(path, G, D, opt_g, opt_d, ema, rng, 1)
    before = snapshot(G, D, opt_g, opt_d, ema)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 2)

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        save_run(path, G, D, opt_g, opt_d, ema, rng, 3)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ckpt_00000001.npz"]  # no temporary file left behind
    rng2, G2, D2, opt_g2, opt_d2, ema2 = make_run(9)
    assert load_run(path, G2, D2, opt_g2, opt_d2, ema2, rng2)["step"] == 1
    assert_same(snapshot(G2, D2, opt_g2, opt_d2, ema2), before)


def test_a_failed_serialization_leaves_nothing(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(10)
    with pytest.raises(TypeError, match="meta is not JSON-serializable"):
        save_checkpoint(tmp_path / "c.npz", {"generator": G}, {}, meta={"bad": object()})
    assert os.listdir(tmp_path) == []


# -- refusing pickles and foreign files -------------------------------------------------------------
def test_object_arrays_are_refused(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(11)
    good = save_checkpoint(tmp_path / "good.npz", {"generator": G}, {})
    with np.load(good, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    entries["module/generator/evil"] = np.array([{"a": 1}, None], dtype=object)
    bad = tmp_path / "bad.npz"
    np.savez(bad, allow_pickle=True, **entries)
    with pytest.raises(CheckpointError, match=r"entry 'module/generator/evil' holds pickled Python objects"):
        load_checkpoint(bad, {"generator": G}, {})
    with pytest.raises(TypeError, match="object array"):
        save_checkpoint(tmp_path / "x.npz", {"m": type("M", (), {"state_dict": lambda self: {
            "w": np.array([None], dtype=object)}})()}, {})


def test_verify_refuses_an_entry_its_meta_lists_but_the_file_lacks(tmp_path):
    """A resume picks the newest checkpoint that verify passes: one with an entry gone must fail
    there, not later in the load, so that the resume falls back to an older one."""
    rng, G, D, opt_g, opt_d, ema = make_run(13)
    good = save_checkpoint(tmp_path / "good.npz", {"generator": G}, {})
    verify(good)  # raises for a file it refuses
    with np.load(good, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    gone = next(k for k in entries if k.startswith("module/generator/"))
    del entries[gone]
    short = tmp_path / "short.npz"
    np.savez(short, **entries)
    with pytest.raises(CheckpointError, match=f"entry '{gone}' is listed in its meta but missing"):
        verify(short)


def test_foreign_files_are_refused(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.zeros(3))
    with pytest.raises(CheckpointError, match="no '__meta__' entry"):
        read_meta(plain)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(CheckpointError, match="checkpoint .*junk.npz is not an .npz file .*delete it"):
        read_meta(junk)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_meta(tmp_path / "missing.npz")


# -- mismatches -------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    rng, G, D, opt_g, opt_d, ema = make_run(12)
    fake_training([G, D], [opt_g, opt_d], ema, rng, 1)
    path = save_run(tmp_path / "ckpt.npz", G, D, opt_g, opt_d, ema, rng, 1)
    return path


def test_shape_mismatch_names_entry_and_both_shapes(saved):
    rng = np.random.default_rng(0)
    G = Tiny(rng, shape=(5, 2))
    before = G.state_dict()["fc.weight"].copy()
    expected = r"shape mismatch for 'module/generator/fc\.weight': checkpoint has \(3, 2\), model has \(5, 2\)"
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(saved, {"generator": G}, {})
    np.testing.assert_array_equal(G.state_dict()["fc.weight"], before)  # nothing was written


def test_missing_and_unexpected_keys_are_named(saved):
    rng = np.random.default_rng(0)
    with pytest.raises(CheckpointError, match=r"missing key 'module/generator/extra'"):
        load_checkpoint(saved, {"generator": Tiny(rng, extra=True)}, {})

    class Smaller(Tiny):
        def state_dict(self):
            out = super().state_dict()
            del out["fc.bias"]
            return out

    with pytest.raises(CheckpointError, match=r"unexpected key 'module/generator/fc\.bias'"):
        load_checkpoint(saved, {"generator": Smaller(rng)}, {})
    with pytest.raises(CheckpointError, match=r"has no module named 'encoder' \(it has: 'generator', 'critic'\)"):
        load_checkpoint(saved, {"encoder": Tiny(rng)}, {})
    with pytest.raises(CheckpointError, match="has no random generator named 'noise'"):
        load_checkpoint(saved, {}, {}, rngs={"noise": rng})


def test_optimizer_and_ema_mismatches_change_nothing(saved):
    rng, G, D, opt_g, opt_d, ema = make_run(13)
    G_before = G.state_dict()["fc.weight"].copy()
    wrong = Adam([gpgan.Variable(np.zeros((3, 3), np.float32), requires_grad=True),
                  gpgan.Variable(np.zeros(2, np.float32), requires_grad=True)])
    with pytest.raises(CheckpointError, match=r"optimizer 'generator'.*'state\.0\.exp_avg' has shape \(3, 2\) "
                                              r"but parameter 0 has shape \(3, 3\)"):
        load_checkpoint(saved, {"generator": G}, {"generator": wrong})
    np.testing.assert_array_equal(G.state_dict()["fc.weight"], G_before)
    with pytest.raises(CheckpointError, match="for a SGD optimizer, not Adam"):
        load_checkpoint(saved, {}, {"critic": Adam(D.parameters())})
    expected = r"ema 'generator'.*'param\.fc\.weight' has shape \(3, 2\) but the average has \(2, 4\)"
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(saved, {}, {}, emas={"generator": EMA(D)})
    with pytest.raises(CheckpointError, match="random generator 'data' was a PCG64, the one given is a MT19937"):
        load_checkpoint(saved, {}, {}, rngs={"data": np.random.Generator(np.random.MT19937(0))})


# -- the run folder's checkpoints ---------------------------------------------------------------
def test_list_latest_and_prune(tmp_path):
    from gpgan.train.run import RunFolder

    run = RunFolder(tmp_path / "run")
    assert run.checkpoints() == [] and run.latest_checkpoint() is None
    for step in (300, 5, 1200, 40):
        save_checkpoint(run.checkpoint_path(step), {}, {}, meta={"step": step})
    folder = tmp_path / "run" / "checkpoints"
    (folder / "notes.txt").write_text("not a checkpoint")
    (folder / ".ckpt_000050.npz.abc123.tmp").write_bytes(b"left by a crash")
    save_checkpoint(run.best_checkpoint_path, {}, {}, meta={"step": 40})
    paths = [p for _, p in run.checkpoints()]
    assert [os.path.basename(p) for p in paths] == ["ckpt_000005.npz", "ckpt_000040.npz",
                                                    "ckpt_000300.npz", "ckpt_001200.npz"]
    assert [RunFolder.checkpoint_step(p) for p in paths] == [5, 40, 300, 1200]
    assert [s for s, _ in run.checkpoints()] == [5, 40, 300, 1200]
    assert run.latest_checkpoint() == (1200, paths[-1]) and read_meta(paths[-1])["step"] == 1200
    removed = run.prune_checkpoints(keep=2)
    assert sorted(os.path.basename(p) for p in removed) == [".ckpt_000050.npz.abc123.tmp", "ckpt_000005.npz",
                                                            "ckpt_000040.npz"]
    assert sorted(os.listdir(folder)) == ["best.npz", "ckpt_000300.npz", "ckpt_001200.npz", "notes.txt"]
    with pytest.raises(ValueError, match="not a checkpoint file name"):
        RunFolder.checkpoint_step("model.npz")
    assert RunFolder.checkpoint_step("ckpt_1.npz") == 1  # any width reads back (older runs, other tools)


# -- with the real gpgan.nn, when it is there ----------------------------------------------------------
def test_round_trip_with_gpgan_nn(tmp_path):
    nn = pytest.importorskip("gpgan.nn")
    if not hasattr(nn, "Linear") or not hasattr(nn, "BatchNorm2d"):
        pytest.skip("gpgan.nn layers not available yet")
    gpgan.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm2d(4))
    opt = Adam(net.parameters(), lr=0.1)
    for p in net.parameters():
        p.grad = gpgan.Variable(np.ones(p.shape, p.dtype))
    opt.step()
    ema = EMA(net)
    path = save_checkpoint(tmp_path / "c.npz", {"net": net}, {"net": opt}, emas={"net": ema})
    gpgan.manual_seed(1)
    net2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm2d(4))
    opt2, ema2 = Adam(net2.parameters()), EMA(net2)
    load_checkpoint(path, {"net": net2}, {"net": opt2}, emas={"net": ema2})
    for key, value in net.state_dict().items():
        np.testing.assert_array_equal(net2.state_dict()[key], value)
    assert_same(opt2.state_dict(), opt.state_dict())


@pytest.mark.cuda
def test_round_trip_on_cuda(tmp_path):
    import cupy

    rng = np.random.default_rng(0)
    G = Tiny(rng)
    for p in G.parameters():
        p.data = cupy.asarray(p.data)
    opt = Adam(G.parameters(), lr=0.1)
    for p in G.parameters():
        p.grad = gpgan.Variable(cupy.ones(p.shape, p.dtype))
    opt.step()
    ema = EMA(G)
    path = save_checkpoint(tmp_path / "c.npz", {"g": G}, {"g": opt}, emas={"g": ema})
    G2 = Tiny(np.random.default_rng(1))
    for p in G2.parameters():
        p.data = cupy.asarray(p.data)
    opt2, ema2 = Adam(G2.parameters()), EMA(G2)
    load_checkpoint(path, {"g": G2}, {"g": opt2}, emas={"g": ema2})
    for (name, p), (_, p2) in zip(G.named_parameters(), G2.named_parameters()):
        assert isinstance(p2.data, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(p2.data), cupy.asnumpy(p.data))
    assert isinstance(opt2.state[0]["exp_avg"], cupy.ndarray)
    assert isinstance(ema2.params["fc.weight"], cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(opt2.state[0]["exp_avg"]), cupy.asnumpy(opt.state[0]["exp_avg"]))
