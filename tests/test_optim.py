"""gpgan.optim: optimizers against hand-written float64 references, schedules, EMA arithmetic."""
import copy

import numpy as np
import pytest

import gpgan
from gpgan.optim import EMA, SGD, Adam, ConstantLR, LinearDecayLR, RMSprop, make_schedule


# -- helpers ------------------------------------------------------------------------------------
def quadratic_grad(p, a, c):
    """Gradient of f(p) = 0.5 * sum(a * (p - c)^2)."""
    return a * (p - c)


def backprop_quadratic(param, a, c):
    """Set param.grad by differentiating the quadratic with the engine (float64 arrays)."""
    param.grad = None
    diff = param - gpgan.Variable(c)
    loss = (gpgan.Variable(a) * diff * diff).sum() * 0.5
    loss.backward()


def adam_reference(p, grads_of, steps, lr, b1, b2, eps, wd):
    """Textbook Adam (bias-corrected moments) in float64, with torch's L2 weight decay."""
    p = p.astype(np.float64).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    for t in range(1, steps + 1):
        g = grads_of(p) + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        m_hat = m / (1 - b1 ** t)
        v_hat = v / (1 - b2 ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(p.copy())
    return out


def sgd_reference(p, grads_of, steps, lr, momentum, dampening, wd, nesterov):
    p = p.copy()
    buf = None
    out = []
    for _ in range(steps):
        g = grads_of(p) + wd * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        out.append(p.copy())
    return out


def rmsprop_reference(p, grads_of, steps, lr, alpha, eps, wd, momentum, centered):
    p = p.copy()
    s = np.zeros_like(p)
    ga = np.zeros_like(p)
    buf = np.zeros_like(p)
    out = []
    for _ in range(steps):
        g = grads_of(p) + wd * p
        s = alpha * s + (1 - alpha) * g ** 2
        if centered:
            ga = alpha * ga + (1 - alpha) * g
            d = np.sqrt(s - ga ** 2) + eps
        else:
            d = np.sqrt(s) + eps
        if momentum:
            buf = momentum * buf + g / d
            p = p - lr * buf
        else:
            p = p - lr * g / d
        out.append(p.copy())
    return out


@pytest.fixture
def problem(rng):
    a = rng.uniform(0.5, 3.0, size=(3, 4))
    c = rng.standard_normal((3, 4))
    p0 = rng.standard_normal((3, 4))
    return a, c, p0


def run_engine(opt_cls, p0, a, c, steps, **kw):
    p = gpgan.Variable(p0.copy(), requires_grad=True)
    opt = opt_cls([p], **kw)
    out = []
    for _ in range(steps):
        backprop_quadratic(p, a, c)
        opt.step()
        out.append(p.data.copy())
    return out


# -- Adam -------------------------------------------------------------------------------------
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adam_matches_reference_trajectory(problem, wd):
    a, c, p0 = problem
    kw = dict(lr=0.05, b1=0.8, b2=0.95, eps=1e-6, wd=wd)
    expected = adam_reference(p0, lambda p: quadratic_grad(p, a, c), 8, **kw)
    got = run_engine(Adam, p0, a, c, 8, lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=wd)
    for t, (e, g) in enumerate(zip(expected, got)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14, err_msg=f"step {t + 1}")
    # bias correction makes the first step lr * g / (|g| + eps): about lr * sign(g)
    g0 = quadratic_grad(p0, a, c) + wd * p0
    np.testing.assert_allclose(got[0] - p0, -0.05 * g0 / (np.abs(g0) + 1e-6), rtol=1e-10)


def test_adam_weight_decay_changes_the_minimum(problem):
    # with L2 added to the gradient, the fixed point solves a (p - c) + wd p = 0
    a, c, p0 = problem
    wd = 0.5
    got = run_engine(Adam, p0, a, c, 1500, lr=0.02, weight_decay=wd)
    np.testing.assert_allclose(got[-1], a * c / (a + wd), atol=1e-3)


def test_adam_converges_to_quadratic_minimum(problem):
    a, c, p0 = problem
    got = run_engine(Adam, p0, a, c, 1500, lr=0.02)
    np.testing.assert_allclose(got[-1], c, atol=1e-3)


def test_adam_float32_stays_float32(problem):
    a, c, p0 = problem
    p = gpgan.Variable(p0.astype(np.float32), requires_grad=True)
    opt = Adam([p], lr=0.05)
    expected = adam_reference(p0.astype(np.float32), lambda q: quadratic_grad(q, a, c), 5, 0.05, 0.9, 0.999, 1e-8, 0)
    for e in expected:
        p.grad = gpgan.Variable(quadratic_grad(p.data.astype(np.float64), a, c).astype(np.float32))
        opt.step()
        assert p.data.dtype == np.float32
        np.testing.assert_allclose(p.data, e, rtol=1e-5, atol=1e-6)
    assert all(v.dtype == np.float32 for v in opt.state[0].values() if hasattr(v, "dtype"))


# -- SGD / RMSprop ----------------------------------------------------------------------------------
@pytest.mark.parametrize("momentum,dampening,wd,nesterov", [
    (0.0, 0.0, 0.0, False), (0.9, 0.0, 0.0, False), (0.9, 0.3, 0.05, False), (0.8, 0.0, 0.1, True)])
def test_sgd_matches_formula(problem, momentum, dampening, wd, nesterov):
    a, c, p0 = problem
    expected = sgd_reference(p0, lambda p: quadratic_grad(p, a, c), 6, 0.1, momentum, dampening, wd, nesterov)
    got = run_engine(SGD, p0, a, c, 6, lr=0.1, momentum=momentum, dampening=dampening,
                     weight_decay=wd, nesterov=nesterov)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)


def test_sgd_momentum_first_steps_by_hand():
    p = gpgan.Variable(np.array([1.0]), requires_grad=True)
    opt = SGD([p], lr=0.1, momentum=0.5)
    p.grad = gpgan.Variable(np.array([2.0]))
    opt.step()  # buf = 2, p = 1 - 0.2
    np.testing.assert_allclose(p.data, [0.8])
    p.grad = gpgan.Variable(np.array([4.0]))
    opt.step()  # buf = 0.5 * 2 + 4 = 5, p = 0.8 - 0.5
    np.testing.assert_allclose(p.data, [0.3])


@pytest.mark.parametrize("momentum,centered,wd", [(0.0, False, 0.0), (0.7, False, 0.0), (0.0, True, 0.1),
                                                  (0.5, True, 0.0)])
def test_rmsprop_matches_formula(problem, momentum, centered, wd):
    a, c, p0 = problem
    expected = rmsprop_reference(p0, lambda p: quadratic_grad(p, a, c), 6, 0.01, 0.9, 1e-6, wd, momentum, centered)
    got = run_engine(RMSprop, p0, a, c, 6, lr=0.01, alpha=0.9, eps=1e-6, weight_decay=wd,
                     momentum=momentum, centered=centered)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)


def test_centered_rmsprop_stays_finite_where_the_gradient_does_not_vary():
    """With a constant gradient, E[g^2] - E[g]^2 is zero up to rounding, and rounds below zero for
    some entries in float32: its root must not be NaN (torch's formula gives NaN weights there)."""
    g = np.random.default_rng(0).uniform(0.1, 10, 1000).astype(np.float32)
    p = gpgan.Variable(np.zeros(1000, np.float32), requires_grad=True)
    opt = RMSprop([p], lr=1e-3, centered=True)
    unclipped_nan = False
    s = np.zeros(1000, np.float32)
    a = np.zeros(1000, np.float32)
    for _ in range(3000):
        p.grad = gpgan.Variable(g)
        opt.step()
        s = np.float32(0.99) * s + np.float32(0.01) * (g * g)
        a = np.float32(0.99) * a + np.float32(0.01) * g
        unclipped_nan |= bool(np.any(s - a * a < 0))
    assert unclipped_nan  # the case arises: without the clip these entries' roots are NaN
    assert np.all(np.isfinite(p.data))


# -- common behaviour -------------------------------------------------------------------------------
def test_step_skips_parameters_without_grad_and_zero_grad_clears(rng):
    p = gpgan.Variable(rng.standard_normal(3), requires_grad=True)
    q = gpgan.Variable(rng.standard_normal(2), requires_grad=True)
    q_before = q.data.copy()
    opt = Adam([p, q], lr=0.1)
    p.grad = gpgan.Variable(np.ones(3))
    opt.step()
    np.testing.assert_array_equal(q.data, q_before)
    assert opt.state[1] == {} and opt.state[0]["step"] == 1
    opt.zero_grad()
    assert p.grad is None and q.grad is None


def test_step_updates_data_in_place():
    p = gpgan.Variable(np.zeros(2), requires_grad=True)
    array = p.data
    opt = SGD([p], lr=1.0)
    p.grad = gpgan.Variable(np.array([1.0, -2.0]))
    opt.step()
    assert p.data is array
    np.testing.assert_array_equal(array, [-1.0, 2.0])


def test_lr_is_settable():
    p = gpgan.Variable(np.zeros(1), requires_grad=True)
    opt = SGD([p], lr=1.0)
    opt.lr = 0.25
    p.grad = gpgan.Variable(np.array([2.0]))
    opt.step()
    np.testing.assert_array_equal(p.data, [-0.5])


def test_bad_arguments_are_named():
    p = gpgan.Variable(np.zeros(1), requires_grad=True)
    with pytest.raises(ValueError, match="requires_grad=False"):
        Adam([gpgan.Variable(np.zeros(1))])
    with pytest.raises(ValueError, match="more than once"):
        Adam([p, p])
    with pytest.raises(ValueError, match="empty"):
        Adam([])
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr must be >= 0"):
        SGD([p], lr=-1)
    opt = SGD([p], lr=1.0)
    p.grad = gpgan.Variable(np.zeros(2))
    with pytest.raises(ValueError, match=r"shape \(1,\) but its gradient has shape \(2,\)"):
        opt.step()


# -- state dicts --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda ps: Adam(ps, lr=0.03, betas=(0.5, 0.9), weight_decay=0.01),
    lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: RMSprop(ps, lr=0.01, momentum=0.3, centered=True),
])
def test_state_dict_round_trip_continues_bitwise(rng, make):
    a = rng.uniform(0.5, 2.0, size=(4, 3))
    c = rng.standard_normal((4, 3))
    init = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]

    def grads(params):
        params[0].grad = gpgan.Variable((a * (params[0].data - c)).astype(np.float32))
        params[1].grad = gpgan.Variable(np.sin(params[1].data))

    def train(params, opt, steps):
        for _ in range(steps):
            grads(params)
            opt.step()

    ref = [gpgan.Variable(x.copy(), requires_grad=True) for x in init]
    ref_opt = make(ref)
    train(ref, ref_opt, 10)

    first = [gpgan.Variable(x.copy(), requires_grad=True) for x in init]
    first_opt = make(first)
    train(first, first_opt, 4)
    saved_state = first_opt.state_dict()
    saved_params = [p.data.copy() for p in first]
    train(first, first_opt, 3)  # keep going: the saved state must not change with it

    resumed = [gpgan.Variable(x, requires_grad=True) for x in saved_params]
    resumed_opt = make(resumed)
    resumed_opt.lr = 123.0  # load_state_dict restores hyperparameters too
    resumed_opt.load_state_dict(saved_state)
    train(resumed, resumed_opt, 6)
    for r, x in zip(ref, resumed):
        np.testing.assert_array_equal(x.data, r.data)
    assert resumed_opt.step_count == ref_opt.step_count == 10
    assert resumed_opt.lr == ref_opt.lr


def test_state_dict_is_flat_numbers_and_arrays(rng):
    p = gpgan.Variable(rng.standard_normal(3), requires_grad=True)
    opt = Adam([p])
    p.grad = gpgan.Variable(np.ones(3))
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"type", "num_params", "step_count", "lr", "beta1", "beta2", "eps", "weight_decay",
                       "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}
    for value in sd.values():
        assert isinstance(value, (int, float, str, np.ndarray))


def test_load_state_dict_names_the_mismatch(rng):
    ps = [gpgan.Variable(np.zeros((2, 3)), requires_grad=True), gpgan.Variable(np.zeros(4), requires_grad=True)]
    opt = Adam(ps)
    for p in ps:
        p.grad = gpgan.Variable(np.ones(p.shape))
    opt.step()
    sd = opt.state_dict()

    other = Adam([gpgan.Variable(np.zeros((2, 3)), requires_grad=True)])
    with pytest.raises(ValueError, match="2 parameters but this optimizer has 1"):
        other.load_state_dict(sd)
    swapped = Adam([gpgan.Variable(np.zeros((3, 2)), requires_grad=True),
                    gpgan.Variable(np.zeros(4), requires_grad=True)])
    with pytest.raises(ValueError, match=r"'state\.0\.exp_avg' has shape \(2, 3\) but parameter 0 has shape \(3, 2\)"):
        swapped.load_state_dict(sd)
    assert swapped.state == [{}, {}]  # a failed load changes nothing
    with pytest.raises(ValueError, match="for a Adam optimizer, not SGD"):
        SGD(ps, lr=0.1).load_state_dict(sd)
    bad = dict(sd)
    del bad["state.1.exp_avg_sq"]
    with pytest.raises(ValueError, match=r"missing key 'state\.1\.exp_avg_sq'"):
        Adam(ps).load_state_dict(bad)
    bad = dict(sd, **{"state.0.junk": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"unexpected key 'state\.0\.junk'"):
        Adam(ps).load_state_dict(bad)


# -- schedules ---------------------------------------------------------------------------------
def test_constant_schedule():
    p = gpgan.Variable(np.zeros(1), requires_grad=True)
    opt = SGD([p], lr=0.3)
    sched = make_schedule("constant", opt, total_steps=10)
    assert isinstance(sched, ConstantLR)
    for _ in range(20):
        sched.step()
        assert opt.lr == 0.3


def test_linear_schedule_values_and_exact_zero():
    p = gpgan.Variable(np.zeros(1), requires_grad=True)
    opt = Adam([p], lr=2e-4)
    sched = make_schedule("linear", opt, total_steps=7)
    assert isinstance(sched, LinearDecayLR) and opt.lr == 2e-4
    seen = []
    for _ in range(9):
        seen.append(sched.step())
    np.testing.assert_allclose(seen[:7], [2e-4 * (7 - k) / 7 for k in range(1, 8)], rtol=1e-15)
    assert seen[6] == 0.0 and seen[7] == 0.0 and seen[8] == 0.0
    assert opt.lr == 0.0


def test_schedule_state_round_trip_and_errors():
    p = gpgan.Variable(np.zeros(1), requires_grad=True)
    opt = Adam([p], lr=1.0)
    sched = LinearDecayLR(opt, 10)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    opt2 = Adam([p], lr=1.0)
    sched2 = LinearDecayLR(opt2, 10)
    sched2.load_state_dict(state)
    assert opt2.lr == opt.lr == pytest.approx(0.6) and sched2.last_step == 4
    with pytest.raises(ValueError, match="the state dict is for a LinearDecayLR"):
        ConstantLR(opt2).load_state_dict(state)
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'step'; accepted: constant, linear, cosine"):
        make_schedule("step", opt, 10)
    with pytest.raises(ValueError, match="needs total_steps"):
        make_schedule("linear", opt)
    with pytest.raises(ValueError, match="positive integer"):
        LinearDecayLR(opt, 0)


# -- EMA --------------------------------------------------------------------------------------
class Tiny:
    """Stand-in for a gpgan.nn.Module: two parameters and two buffers (one integer)."""

    def __init__(self, rng, dtype=np.float64):
        self.weight = gpgan.Variable(rng.standard_normal((3, 2)).astype(dtype), requires_grad=True)
        self.bias = gpgan.Variable(rng.standard_normal(2).astype(dtype), requires_grad=True)
        self.running_mean = rng.standard_normal(2).astype(dtype)
        self.num_batches = np.array(0, dtype=np.int64)

    def named_parameters(self):
        yield "fc.weight", self.weight
        yield "fc.bias", self.bias

    def named_buffers(self):
        yield "bn.running_mean", self.running_mean
        yield "bn.num_batches_tracked", self.num_batches

    def parameters(self):
        return [p for _, p in self.named_parameters()]


def set_weights(module, value):
    for _, p in module.named_parameters():
        p.data[...] = value


def test_ema_closed_form_constant_then_changing(rng):
    module = Tiny(rng)
    d, s = 0.8, 3
    ema = EMA(module, decay=d, start_step=s)
    # steps 0..s-1 (before start_step): the average copies the weights
    for step in range(s):
        set_weights(module, step + 1.0)
        ema.update(step)
        np.testing.assert_array_equal(ema.params["fc.weight"], np.full((3, 2), step + 1.0))
    e0 = float(s)  # the weight at step s - 1
    # constant weight W for n steps: avg = W + (e0 - W) d^n
    W = -2.0
    set_weights(module, W)
    for n in range(1, 6):
        ema.update(s - 1 + n)
        np.testing.assert_allclose(ema.params["fc.bias"], W + (e0 - W) * d ** n, rtol=1e-13)
    # then a changing sequence w_j: avg = d^n e + (1 - d) sum_j d^(n-j) w_j
    e = W + (e0 - W) * d ** 5
    ws = rng.standard_normal(6)
    for j, w in enumerate(ws, start=1):
        set_weights(module, w)
        ema.update(s + 5 + j)
        expected = d ** j * e + (1 - d) * np.sum(d ** (j - np.arange(1, j + 1)) * ws[:j])
        np.testing.assert_allclose(ema.params["fc.weight"], expected, rtol=1e-12)
    assert ema.num_updates == s + 5 + 6


def test_ema_start_step_zero_averages_from_the_first_update(rng):
    module = Tiny(rng)
    w0 = module.weight.data.copy()
    ema = EMA(module, decay=0.9)
    module.weight.data += 1.0
    ema.update(0)
    np.testing.assert_allclose(ema.params["fc.weight"], 0.9 * w0 + 0.1 * (w0 + 1.0), rtol=1e-14)


def test_ema_copies_buffers_and_keeps_dtype(rng):
    module = Tiny(rng, dtype=np.float32)
    ema = EMA(module, decay=0.5)
    module.running_mean[...] = [7.0, 8.0]
    module.num_batches[...] = 42
    module.weight.data[...] = 1.0
    ema.update(0)
    np.testing.assert_array_equal(ema.buffers["bn.running_mean"], [7.0, 8.0])
    assert int(ema.buffers["bn.num_batches_tracked"]) == 42
    assert ema.params["fc.weight"].dtype == np.float32
    # the stored buffer is a copy, not the module's array
    module.running_mean[...] = 0.0
    np.testing.assert_array_equal(ema.buffers["bn.running_mean"], [7.0, 8.0])


def test_ema_swapped_into_restores_exactly(rng):
    module = Tiny(rng)
    ema = EMA(module, decay=0.7)
    for step in range(5):
        set_weights(module, rng.standard_normal())
        module.running_mean[...] = rng.standard_normal(2)
        ema.update(step)
    module.weight.data[...] = rng.standard_normal((3, 2))  # training moved on after the update
    module.running_mean[...] = rng.standard_normal(2)
    before = {n: p.data.copy() for n, p in module.named_parameters()}
    before_buf = {n: b.copy() for n, b in module.named_buffers()}
    arrays = [module.weight.data, module.bias.data, module.running_mean]
    with ema.swapped_into(module) as swapped:
        assert swapped is module
        np.testing.assert_array_equal(module.weight.data, ema.params["fc.weight"])
        np.testing.assert_array_equal(module.running_mean, ema.buffers["bn.running_mean"])
        module.running_mean[...] += 1.0  # sampling in training mode would touch buffers
    for n, p in module.named_parameters():
        np.testing.assert_array_equal(p.data, before[n])
    for n, b in module.named_buffers():
        np.testing.assert_array_equal(b, before_buf[n])
    # restored in place: the module still holds the very same arrays
    assert all(x is y for x, y in zip([module.weight.data, module.bias.data, module.running_mean], arrays))
    with pytest.raises(RuntimeError, match="boom"):
        with ema.swapped_into():
            raise RuntimeError("boom")
    np.testing.assert_array_equal(module.weight.data, before["fc.weight"])


def test_ema_copy_to_other_module_and_state_round_trip(rng):
    module = Tiny(rng)
    ema = EMA(module, decay=0.6, start_step=1)
    for step in range(4):
        set_weights(module, float(step))
        ema.update(step)
    target = Tiny(rng)
    ema.copy_to(target)
    np.testing.assert_array_equal(target.bias.data, ema.params["fc.bias"])
    np.testing.assert_array_equal(target.running_mean, ema.buffers["bn.running_mean"])

    restored = EMA(Tiny(rng), decay=0.1)
    restored.load_state_dict(copy.deepcopy(ema.state_dict()))
    assert (restored.decay, restored.start_step, restored.num_updates) == (0.6, 1, 4)
    for name in ema.params:
        np.testing.assert_array_equal(restored.params[name], ema.params[name])
    set_weights(module, 9.0)
    set_weights(restored.module, 9.0)
    ema.update(4)
    restored.update(4)
    np.testing.assert_array_equal(restored.params["fc.weight"], ema.params["fc.weight"])


def test_ema_rampup_closed_form(rng):
    """With rampup the n-th averaging update (n from 0) uses d_n = min(decay, (1 + n) / (10 + n)):
    after copies up to start_step, avg_n = d_n avg_(n-1) + (1 - d_n) w_n, checked against the
    recursion in float64 and against its values (0.1, 0.5 at n = 8, the decay from n = 890)."""
    module = Tiny(rng)
    decay, s = 0.99, 2
    ema = EMA(module, decay=decay, start_step=s, rampup=True)
    set_weights(module, 3.0)
    for step in range(s):  # copies
        ema.update(step)
    assert ema.averaged == 0 and ema.ramped_decay() == pytest.approx(0.1)
    expected, ws = 3.0, rng.standard_normal(1000)
    for n, w in enumerate(ws):
        d = min(decay, (1 + n) / (10 + n))
        set_weights(module, w)
        ema.update(s + n)
        expected = d * expected + (1 - d) * w
        if n < 30 or n % 97 == 0:
            np.testing.assert_allclose(ema.params["fc.weight"], expected, rtol=1e-12, atol=1e-15)
    assert ema.averaged == 1000 and ema.num_updates == 1000 + s
    np.testing.assert_allclose(ema.params["fc.bias"], expected, rtol=1e-12, atol=1e-15)
    probe = EMA(Tiny(rng), decay=decay, rampup=True)
    for n, want in ((0, 0.1), (8, 0.5), (80, 0.9), (889, (1 + 889) / (10 + 889)), (890, 0.99), (5000, 0.99)):
        probe.averaged = n
        assert probe.ramped_decay() == pytest.approx(want, rel=1e-15)


def test_ema_rampup_off_is_the_plain_average_and_on_resumes_exactly(rng):
    a, b = Tiny(rng, np.float32), Tiny(rng, np.float32)
    b.weight.data[...] = a.weight.data
    b.bias.data[...] = a.bias.data
    plain, ramped = EMA(a, decay=0.9), EMA(b, decay=0.9, rampup=True)
    stream = rng.standard_normal((40, 2)).astype(np.float32)
    for step, w in enumerate(stream[:20]):
        for module in (a, b):
            module.bias.data[...] = w
        plain.update(step)
        ramped.update(step)
    # Early on the ramp weighs the new weights far more: at step 0, 0.9 of w against 0.1 of it.
    assert not np.array_equal(plain.params["fc.bias"], ramped.params["fc.bias"])
    # A copy restored from the state continues bit for bit (the count of averaged updates is state).
    state = copy.deepcopy(ramped.state_dict())
    assert state["averaged"] == 20
    restored = EMA(Tiny(rng, np.float32), decay=0.5, rampup=True)
    restored.load_state_dict(state)
    for step, w in enumerate(stream[20:], start=20):
        b.bias.data[...] = w
        restored.module.bias.data[...] = w
        ramped.update(step)
        restored.update(step)
    np.testing.assert_array_equal(restored.params["fc.bias"], ramped.params["fc.bias"])
    # A state from before the count existed (a trainer's: steps from 1, copies below start_step).
    old = {k: v for k, v in ramped.state_dict().items() if k != "averaged"}
    old.update(num_updates=100, start_step=30)
    restored.load_state_dict(old)
    assert restored.averaged == 100 - 29


def test_ema_mismatch_errors_name_the_entry(rng):
    ema = EMA(Tiny(rng))
    sd = ema.state_dict()
    bad = dict(sd, **{"param.fc.weight": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"'param\.fc\.weight' has shape \(2, 3\) but the average has \(3, 2\)"):
        ema.load_state_dict(bad)
    bad = dict(sd)
    del bad["buffer.bn.running_mean"]
    with pytest.raises(ValueError, match=r"missing key 'buffer\.bn\.running_mean'"):
        ema.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"unexpected key 'param\.extra'"):
        ema.load_state_dict(dict(sd, **{"param.extra": np.zeros(1)}))
    with pytest.raises(ValueError, match="decay must be in"):
        EMA(Tiny(rng), decay=1.5)


def test_ema_with_gpgan_nn_module(rng):
    nn = pytest.importorskip("gpgan.nn")
    if not hasattr(nn, "Linear") or not hasattr(nn, "BatchNorm2d"):
        pytest.skip("gpgan.nn layers not available yet")
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm2d(4))
    ema = EMA(net, decay=0.5)
    originals = {k: v.copy() for k, v in net.state_dict().items()}
    for p in net.parameters():
        p.data += 1.0
    ema.update(0)
    with ema.swapped_into(net):
        # Absolute tolerance: the float32 average of w and w + 1 is exact to the rounding of
        # numbers near 1 (about 1e-7), and w + 0.5 may be close to zero, where any relative
        # tolerance fails (the weights depend on which tests ran before).
        np.testing.assert_allclose(net.state_dict()["0.weight"], originals["0.weight"] + 0.5, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(net.state_dict()["0.weight"], originals["0.weight"] + 1.0)
