"""gpgan.backend.mechanisms: each benchmark switch turns its mechanism off, and the step's loss and
gradients stay what the mechanism's entry says (the same bits, or within float32 rounding).

Each mechanism runs the steps of scripts/bench_engine.py that exercise it (small batches), on and
off, on the same weights and inputs; what ran is checked too, with the switch on and not with it
off, so that no comparison passes because neither arm ran it: oneDNN's products, convolutions,
fused parts and compiled call through gpgan.kernels.record_dispatch's records, the others through a
spy on the mechanism's own code (where each one's comment says why no record shows it).
"""
import contextlib
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from gpgan.backend import mechanisms, threads
from gpgan.kernels import products, record_dispatch, switches
from gpgan.kernels.cpu import passes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
numba_kernels = pytest.importorskip("gpgan.kernels.cpu.numba_kernels", reason="needs Numba")
pytestmark = pytest.mark.skipif(not switches.onednn_switch._installed(), reason="needs onednn-cpu-gomp")
from gpgan.kernels.cpu import onednn  # noqa: E402  (after the skip: imports nothing optional)


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_engine", os.path.join(ROOT, "scripts", "bench_engine.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def works():
    """bench_engine's workloads at small batches (the compiled passes' and oneDNN's thresholds are
    still passed: 256 KiB activations, 2**22 multiply-adds)."""
    bench = _load_bench()
    return {"toy_r1": bench.Workload("toy_r1", "float32", "cpu", batch=256),
            "r1": bench.Workload("r1", "float32", "cpu", batch=16),
            "wgangp": bench.Workload("wgangp", "float32", "cpu", batch=16),
            "generator": bench.Workload("generator", "float32", "cpu", batch=8)}


@pytest.fixture(autouse=True)
def accelerators_on():
    """Both accelerators on, every mechanism on, as a `.[cpu]` install runs; restored afterwards."""
    before = switches.numba_switch.enabled(), switches.onednn_switch.enabled(), mechanisms.off.names()
    switches.numba_switch.set(True)
    switches.onednn_switch.set(True)
    mechanisms.set_off([])
    yield
    switches.numba_switch.set(before[0])
    switches.onednn_switch.set(before[1])
    mechanisms.set_off(before[2])


def _spy(monkeypatch, owner, name, calls):
    original = getattr(owner, name)

    def spying(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spying)


def _onednn_product(record):
    return record.library == "onednn" and record.op in ("matmul", "fused_affine")


def _onednn_convolution(record):
    return record.library == "onednn" and record.op in ("conv2d", "conv_transpose2d", "conv2d_grad_weight")


def _fused_linear(record):  # a Linear's bias or rectifier in oneDNN's product
    return "bias" in record.fused or "rectifier" in record.fused


def _fused_addend(record):
    return "addend" in record.fused


def _compiled_call(record):
    return record.call == "compiled"


def _copied(call):
    return call[1]["result"] is not call[0][0]


#: In CASES: the mechanism's runs are gpgan.kernels.record_dispatch's records that count.
RECORDED = None

# name -> (workloads, RECORDED or the spied (object, attribute), which records or calls count,
# whether it is the "off" arm that makes more of them, a setup before both arms)
CASES = {
    "onednn_products": (["toy_r1"], RECORDED, _onednn_product, False, None),
    "onednn_convolutions": (["r1"], RECORDED, _onednn_convolution, False, None),
    "fused_linear": (["toy_r1"], RECORDED, _fused_linear, False, None),
    "fused_addend": (["toy_r1"], RECORDED, _fused_addend, False, None),
    "product_runner": (["toy_r1"], RECORDED, _compiled_call, False, None),
    # Memory objects kept per operation and thread change no result and no library: their effect
    # is speed only, so no record shows them; the spy counts the objects made.
    "bound_memory": (["toy_r1"], (onednn._BoundArguments, "__init__"), None, True, None),
    # The passes below run no other library, where the records say which one ran, and leave every
    # value as it was (or within float32 rounding): their effect is speed only, seen by a spy.
    "split_passes": (["generator"], (threads, "_get_pool"), None, False, "split"),
    "numba_passes": (["toy_r1", "r1"], (numba_kernels, "leaky_relu"), None, False, None),
    "numba_threads": (["generator"], (numba_kernels, "use_threads"), lambda c: c[0][0] > 1, False, None),
    "layout_copy": (["r1"], (passes, "_in_layout_of"), None, False, None),
    "numba_batch_norm": (["generator"], (numba_kernels, "channel_moments"), None, False, None),
    "numba_conv_copies": (["r1", "generator"], (numba_kernels, "window_columns"), None, False, "no oneDNN"),
    "einsum_sums": (["generator"], (np, "einsum"), lambda c: isinstance(c[0][1], list), False, "no Numba"),
    "blas_operand": (["wgangp"], (products, "_blas_operand"), _copied, False, None),
}


def test_every_mechanism_has_a_case_and_a_documented_tolerance():
    assert set(CASES) == set(mechanisms.MECHANISMS)
    assert all(entry[2] in ("bits", "float32") for entry in mechanisms.MECHANISMS.values())


def _steps(works, names):
    return {name: works[name].step() for name in names}


def _flat(grads):
    return np.concatenate([np.asarray(g, np.float64).ravel() for g in grads])


@pytest.mark.parametrize("name", list(CASES))
def test_a_mechanism_off_runs_without_it_and_keeps_the_results(name, works, monkeypatch):
    names, spied, counts, more_when_off, setup = CASES[name]
    if name == "numba_threads" and threads.get_num_threads() < 2:
        pytest.skip("one thread: nothing to turn off")
    if setup == "split":  # test-sized arrays split too, on two threads
        monkeypatch.setattr(threads, "MIN_BYTES_PER_THREAD", 1 << 16)
        monkeypatch.setattr(threads, "_threads", 2)
    elif setup == "no oneDNN":
        switches.onednn_switch.set(False)
    elif setup == "no Numba":
        switches.numba_switch.set(False)
    calls = []
    recorded = contextlib.nullcontext(calls)
    if spied is RECORDED:
        recorded = record_dispatch()
    elif spied[1] == "_blas_operand":  # record what it returned, to tell a copy from the operand itself
        original = products._blas_operand

        def recording(x):
            result = original(x)
            calls.append(((x,), {"result": result}))
            return result

        monkeypatch.setattr(products, "_blas_operand", recording)
    else:
        _spy(monkeypatch, *spied, calls)

    def counted():
        return len([c for c in calls if counts is None or counts(c)])

    with recorded as calls:
        on = _steps(works, names)
        count_on = counted()
        calls.clear()
        with mechanisms.without(name):
            off = _steps(works, names)
        count_off = counted()
    assert mechanisms.off.names() == []
    if more_when_off:  # memory objects bound by earlier tests stay bound: the count on may be 0
        assert count_off > count_on, (count_on, count_off)
    else:
        assert count_on > 0 and count_off == 0, (count_on, count_off)

    exact = mechanisms.MECHANISMS[name][2] == "bits"
    for workload in names:
        (loss_on, grads_on), (loss_off, grads_off) = on[workload], off[workload]
        if exact:
            np.testing.assert_array_equal(loss_off, loss_on)
            for a, b in zip(grads_off, grads_on):
                np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(loss_off, loss_on, rtol=1e-5)
            on_flat, off_flat = _flat(grads_on), _flat(grads_off)
            assert np.linalg.norm(off_flat - on_flat) <= 1e-4 * np.linalg.norm(on_flat), workload


def test_parse_names_the_closest_mechanism():
    assert mechanisms.parse(" fused_linear, ,split_passes") == ["fused_linear", "split_passes"]
    with pytest.raises(ValueError, match="'fused_linera'.*did you mean 'fused_linear'"):
        mechanisms.parse("fused_linera")


def test_the_environment_variable_turns_mechanisms_off_at_import():
    code = "from gpgan.backend import mechanisms; print(','.join(mechanisms.off.names()))"
    env = dict(os.environ, GPGAN_BENCH_WITHOUT="split_passes,fused_linear", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fused_linear,split_passes"


def test_without_restores_what_was_off_before():
    mechanisms.set_off(["layout_copy"])
    with mechanisms.without("einsum_sums"):
        assert mechanisms.off.names() == ["layout_copy", "einsum_sums"]
    assert mechanisms.off.names() == ["layout_copy"]
