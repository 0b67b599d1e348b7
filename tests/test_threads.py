"""gpgan.backend.threads: splitting array passes over threads, and the kernels that use it."""
import threading

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.backend import threads


@pytest.fixture
def restore_threads():
    before = threads.get_num_threads()
    yield
    threads.set_num_threads(before)


@pytest.fixture
def split_everything(monkeypatch, restore_threads):
    """Three threads and no minimum size, so even test-sized arrays are split."""
    monkeypatch.setattr(threads, "MIN_BYTES_PER_THREAD", 0)
    threads.set_num_threads(3)


def test_chunks_cover_the_range_once_on_several_threads(split_everything):
    seen, names = [], set()
    lock = threading.Lock()
    together = threading.Barrier(3, timeout=10)  # passes only if the three chunks run at once

    def work(a, b):
        together.wait()
        with lock:
            seen.append((a, b))
            names.add(threading.current_thread().name)

    threads.parallel_range(work, 10)
    assert sorted(seen) == [(0, 3), (3, 6), (6, 10)]
    assert len(names) == 3 and threading.main_thread().name in names


def test_small_work_one_thread_and_nested_calls_run_alone(monkeypatch, restore_threads):
    threads.set_num_threads(4)
    calls = []
    threads.parallel_range(lambda a, b: calls.append((a, b)), 8, nbytes=10)  # far below the minimum
    assert calls == [(0, 8)]
    monkeypatch.setattr(threads, "MIN_BYTES_PER_THREAD", 0)
    inner = []

    def outer(a, b):
        threads.parallel_range(lambda c, d: inner.append((c, d)), 4)

    threads.parallel_range(outer, 2)
    assert sorted(inner) == [(0, 4), (0, 4)]  # each chunk ran its inner range unsplit
    threads.set_num_threads(1)
    one = []
    threads.parallel_range(lambda a, b: one.append((a, b)), 5)
    assert one == [(0, 5)]


def test_an_error_in_a_chunk_is_raised_after_all_chunks(split_everything):
    done = []

    def work(a, b):
        if a == 0:
            raise RuntimeError("chunk failed")
        done.append(a)

    with pytest.raises(RuntimeError, match="chunk failed"):
        threads.parallel_range(work, 9)
    assert sorted(done) == [3, 6]


def test_set_num_threads_refuses_bad_values():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n must be an int >= 1"):
            threads.set_num_threads(bad)


def test_environment_variable_sets_the_default(monkeypatch):
    monkeypatch.delenv("GPGAN_NUM_THREADS", raising=False)
    # Without the variable: every core this process should use, however OpenBLAS was loaded.
    assert threads._default_threads() == threads.available_cores() >= 1
    monkeypatch.setenv("GPGAN_NUM_THREADS", "3")
    assert threads._default_threads() == 3
    monkeypatch.setenv("GPGAN_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="GPGAN_NUM_THREADS must be a positive integer"):
        threads._default_threads()


def test_split_kernels_give_the_serial_results(split_everything, rng):
    # Split over 3 threads, every kernel gives exactly the one-thread result: conv2d (padding,
    # im2col), the transposed convolution's channels-first scatter (6 -> 2 channels), channels-last
    # scatter (24 -> 17) and gather form (6 -> 20), batch norm on channels-last rows (its sums
    # run over fixed blocks, whatever the thread count), and the gradients through all of them.
    x = rng.standard_normal((5, 6, 7, 7))
    weights = {"conv": rng.standard_normal((24, 6, 4, 4)), "few": rng.standard_normal((6, 2, 4, 4)),
               "many": rng.standard_normal((24, 17, 3, 3)), "wide": rng.standard_normal((6, 20, 3, 3)),
               "gamma": rng.standard_normal(24), "beta": rng.standard_normal(24)}

    def run():
        xv = gpgan.Variable(x, requires_grad=True)
        ws = {k: gpgan.Variable(v, requires_grad=True) for k, v in weights.items()}
        h = F.conv2d(xv, ws["conv"], stride=2, padding=1)
        outs = [F.batch_norm(h, None, None, ws["gamma"], ws["beta"], training=True), F.conv_transpose2d(xv, ws["few"], stride=2, padding=1),
                F.conv_transpose2d(h, ws["many"], stride=2, padding=1, output_padding=1),
                F.conv_transpose2d(xv, ws["wide"], stride=2, padding=1, output_padding=1)]
        loss = sum((o * o).sum() for o in outs)
        grads = gpgan.grad(loss, [xv] + list(ws.values()))
        return [o.data for o in outs] + [g.data for g in grads]

    split = run()
    threads.set_num_threads(1)
    serial = run()
    for a, b in zip(split, serial):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_split_activations_give_the_serial_results(layout, split_everything, rng):
    # relu, leaky relu (forward, its gradient's scale, and the mask product) and a convolution's
    # bias add, split over 3 threads, in float32, to second order (R1's path through the critic):
    # identical values, and the output keeps the input's memory layout.
    x = rng.standard_normal((7, 5, 4, 3)).astype(np.float32)
    if layout == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)

    def run():
        xv = gpgan.Variable(x, requires_grad=True)
        wv, bv = gpgan.Variable(w, requires_grad=True), gpgan.Variable(b, requires_grad=True)
        h = F.leaky_relu(F.conv2d(xv, wv, bv, padding=1), 0.2)
        out = F.relu(h) + F.leaky_relu(xv, 0.1).sum()
        gx, = gpgan.grad((out * out).sum(), [xv], create_graph=True)
        second = gpgan.grad((gx * gx).sum(), [wv, bv])
        return [h.data, out.data, gx.data] + [g.data for g in second]

    split = run()
    assert F.relu(gpgan.Variable(x)).data.strides == x.strides
    threads.set_num_threads(1)
    serial = run()
    for a, b in zip(split, serial):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)
