#!/usr/bin/env python3
"""Time gpgan's training steps, side by side with PyTorch on the same weights and inputs.

Workloads (``--workloads``, default the first four; batch and widths as below, float32 unless
``--dtype``). A *step* is the forward pass, the loss and the gradients of the loss with respect to
the weights being trained, taken as gpgan's trainer takes them (``gpgan.grad(loss, params)``; in
PyTorch ``torch.autograd.grad``); no optimizer update. Real and fake batches are fixed arrays.

  r1         DCGAN critic (gpgan.models.DCGANCritic, width 64: conv 3->64->128->256, k4 s2 p1,
             leaky ReLU 0.2, linear 4096->1), batch 64 of 32x32x3: non-saturating loss on a real
             and a fake batch + R1 (weight 10: 5 * mean ||grad_x D(x_real)||^2), a double backward.
             One forward at the real batch serves the loss and R1, as in gpgan's trainer,
             GAN_stability and StyleGAN2-ADA.
  wgangp     the same critic: WGAN loss + WGAN-GP penalty (lambda 10) on random interpolates.
  generator  DCGAN generator (gpgan.models.DCGANGenerator: latent 128, width 64, linear to
             4x4x512, BatchNorm in training mode, 3 transposed convs 512->256->128->64, a 3x3 conv
             to 3 channels) then the critic; non-saturating generator loss, first order, gradients
             w.r.t. the generator's weights.
  toy_r1     MLP critic 2-512-512-512-1 (gpgan.models.MLPCritic, ReLU), batch 256: non-saturating
             loss + R1 (weight 1), as configs/quickstart.yaml at width 512.
  plain      the DCGAN critic's first-order step (non-saturating loss, no penalty).
  r3gan      one training step of configs/r3gan_cifar_cpu.yaml's networks (class-conditional
             R3GAN generator and projection critic, R3GAN_CPU below), at its batch (16), as
             gpgan's trainer takes it with one critic step: the critic's step (fakes from the
             generator under no_grad; RpGAN loss + R1 + R2 with weight 0.05, sharing the loss's
             forwards, a double backward) then the generator's (the critic's logits of the reals
             under no_grad; RpGAN generator loss). The gradients are the critic's weights' then the
             generator's, the loss is the critic's objective plus the generator's loss. Not
             among the defaults. PyTorch's twin is scripts/torch_r3gan.py, the definition written
             again in torch (also what tests/test_r3gan_vs_torch.py checks gpgan against).

``--augment diffaugment`` (or ``ada``, at ``--augment-p``) adds, beside each DCGAN workload W, its
twin ``W+diffaugment`` that augments every image the critic sees, as gpgan's trainer does
(gpgan.augment; random numbers drawn once, like the penalty's): the critic steps augment the real
and fake batches before the critic, the generator step differentiates through the augmentation of
its fakes; ``--augment-through`` takes R1 at the un-augmented reals, through the augmentation.
The twins are timed interleaved with the plain workloads, one step each in turn (``--turn``
defaults to 1 here: blocks of a workload's steps pick up the host's drift over seconds), so load
from other processes hits both alike, and each twin reports its median wall and CPU time over the
plain workload's (``augment_cost``). PyTorch has no twin of them (not with ``--torch``).

gpgan's penalties and losses are gpgan.losses' (what training runs); PyTorch's are the same
formulas written with torch. With ``--torch`` the two engines' steps are timed interleaved in
turns (``--turn K``: K gpgan steps, K PyTorch steps, ..., alternating which goes first; each turn's
first step untimed, the others back to back as in training), so load from other processes hits
both alike; PyTorch runs with TF32 off and ``torch.set_num_threads`` = the cores this process
may use. Reported per workload: median and min over ``--steps`` timed steps (after ``--warmup``),
quartiles, process CPU time, the ratio gpgan / PyTorch of the medians (and of the mins), the loss
of both, the relative error of both engines' gradients against gpgan's float64 gradients (same
weights and inputs), and peak memory.

On a machine shared with other work, the CPU time other processes used during each step (Linux's
/proc/stat less this process's own) tells the steps they slowed from the clean ones; the median of
the clean steps and their ratio are reported too, and ``--budget S`` keeps sampling (up to S
seconds) until each engine has ``--steps`` clean steps.

Peak memory: tracemalloc's peak over one gpgan step (NumPy reports its buffers to tracemalloc;
weights and inputs, allocated before, are not counted), and, per engine, the peak resident set of
a separate process that builds the workload and runs ``--memory-steps`` steps (``VmHWM``; also
its rise over the resident set before the first step). On CUDA: the peak of CuPy's pool.

    python scripts/bench_engine.py --torch                         # CPU, all four, with PyTorch
    python scripts/bench_engine.py --torch --steps 20 --json out.json
    python scripts/bench_engine.py --device cpu --workloads r1 --profile
    python scripts/bench_engine.py --device cuda --torch

Freed host memory is kept for reuse in the process, as gpgan's trainer keeps it
(:mod:`gpgan.backend.host_memory`; ``GPGAN_KEEP_HOST_MEMORY=0`` leaves glibc's defaults); the
policy is process-wide, so PyTorch's buffers, in the same process, are kept alike.

``--without NAMES`` turns CPU speed mechanisms off for a benchmark (gpgan.backend.mechanisms, the
same as ``GPGAN_BENCH_WITHOUT``; never for training); the report's ``switches`` say which ran.
scripts/ab_mechanisms.py runs this script with each mechanism on and off.

Also reported on the CPU: the engine's own cost per function call, from 200,000 additions of
one-element float32 Variables (recorded, under no_grad, and NumPy's bare ``a + b``).
"""
import argparse
import cProfile
import json
import operator
import os
import pstats
import subprocess
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gpgan  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
import numpy  # noqa: E402
from gpgan.backend.precision import get_matmul_precision, matmul_precision  # noqa: E402
from gpgan.backend import (  # noqa: E402
    available_cores,
    cupy_available,
    device_description,
    get_num_threads,
    to_device,
)
from gpgan.backend import mechanisms  # noqa: E402
from gpgan.backend.graph import CapturedStep  # noqa: E402
from gpgan.kernels import compiled_kernels_version, configure_process, onednn_version  # noqa: E402
from gpgan.losses import make_loss, make_penalty  # noqa: E402
from gpgan.models import DCGANCritic, DCGANGenerator, MLPCritic, make_conditional  # noqa: E402

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
# configs/r3gan_cifar_cpu.yaml's networks, batch, classes and R1/R2 weight, written out here (the
# comparison venv that runs --torch has no YAML reader); tests/test_models_r3gan.py checks them
# against the config.
R3GAN_CPU = {"options": {"widths": [32, 32, 16, 16], "blocks": [1, 1, 1, 1], "expansion": 2, "group_size": 16},
             "latent_dim": 64, "embedding_dim": 64, "classes": 10, "batch": 16, "penalty_weight": 0.05}

WORKLOADS = ("r1", "wgangp", "generator", "toy_r1", "plain", "r3gan")
DEFAULT_WORKLOADS = ("r1", "wgangp", "generator", "toy_r1")


def blas_description():
    """numpy's BLAS: from threadpoolctl when installed (library and threads), else numpy's config."""
    try:
        import threadpoolctl

        for info in threadpoolctl.threadpool_info():
            if info.get("user_api") == "blas" and "numpy" in info.get("filepath", ""):
                return f"{info['internal_api']} {info.get('version')} ({info['num_threads']} threads)"
    except ImportError:
        pass
    try:
        blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:
        return "unknown BLAS"


# -- the workloads, in gpgan ----------------------------------------------------------------------
class Workload:
    """One workload's models, inputs and step in gpgan; ``torch_step`` builds PyTorch's twin.

    ``step()`` returns ``(loss, gradients)`` as arrays; ``self.modules`` maps names to the gpgan
    modules (copied into PyTorch by state_dict), ``self.trained`` names the one whose weights get
    gradients.
    """

    def __init__(self, name, dtype, device, batch=None, seed=0, augment="none", augment_p=0.0, through=False):
        self.name, self.dtype, self.device = name, numpy.dtype(dtype), device
        rng = numpy.random.default_rng(seed)
        if name == "r3gan":
            self._build_r3gan(batch, rng, dtype, device)
            return
        if name == "toy_r1":
            self.batch = batch or 256
            self.modules = {"critic": MLPCritic(width=512, depth=3, rng=rng)}
            shape = (self.batch, 2)
        else:
            self.batch = batch or 64
            self.modules = {"critic": DCGANCritic(width=64, rng=rng)}
            if name == "generator":
                self.modules["generator"] = DCGANGenerator(latent_dim=128, width=64, rng=rng)
            shape = (self.batch, 3, 32, 32)
        self.trained = "generator" if name == "generator" else "critic"
        for m in self.modules.values():
            m.to(device, self.dtype)
        self.real = to_device(rng.uniform(-1, 1, shape).astype(self.dtype), device)
        self.fake = to_device(rng.uniform(-1, 1, shape).astype(self.dtype), device)
        self.z = to_device(rng.standard_normal((self.batch, 128)).astype(self.dtype), device)
        self.params = list(self.modules[self.trained].parameters())
        self.loss = make_loss("wgan" if name == "wgangp" else "non_saturating")
        self.penalty = {"r1": make_penalty("r1", weight=10.0), "toy_r1": make_penalty("r1", weight=1.0),
                        "wgangp": make_penalty("wgan_gp", weight=10.0)}.get(name)
        # The penalty's random numbers, drawn once and used at every step by both engines (so
        # that a CUDA graph of the step reads them from the device, and neither engine's timed
        # step draws or copies them).
        self.draws = None if self.penalty is None else {
            k: to_device(v, device) for k, v in self.penalty.draw(numpy.random.default_rng(1), self.real).items()}
        self.augment, self.through = None, bool(through)
        if augment != "none" and name != "toy_r1":
            from gpgan.augment import ADA, DiffAugment

            self.augment = DiffAugment() if augment == "diffaugment" else ADA(p=augment_p, mode="fixed", device=device)
            aug_rng = numpy.random.default_rng(2)
            self.augment_draws = [{k: to_device(v, device) for k, v in self.augment.draw(aug_rng, self.real).items()}
                                  for _ in range(2)]

    def _build_r3gan(self, batch, rng, dtype, device):
        """The ``r3gan`` workload: configs/r3gan_cifar_cpu.yaml's networks, batch and penalty."""
        self.classes, self.options = R3GAN_CPU["classes"], R3GAN_CPU["options"]
        self.batch = batch or R3GAN_CPU["batch"]
        self.modules = {
            "critic": make_conditional("critic", "r3gan_critic", self.classes, **self.options, rng=rng),
            "generator": make_conditional("generator", "r3gan_generator", self.classes, R3GAN_CPU["embedding_dim"],
                                          latent_dim=R3GAN_CPU["latent_dim"], **self.options, rng=rng)}
        self.trained = "critic+generator"
        for m in self.modules.values():
            m.to(device, self.dtype)
        shape = (self.batch, 3, self.modules["critic"].base.image_size, self.modules["critic"].base.image_size)
        self.real = to_device(rng.uniform(-1, 1, shape).astype(self.dtype), device)
        self.fake = None  # the generator's, at every step
        self.z = to_device(rng.standard_normal((self.batch, self.modules["generator"].latent_dim)).astype(self.dtype),
                           device)
        self.labels = {k: to_device(rng.integers(0, self.classes, self.batch), device) for k in ("real", "fake")}
        self.params = list(self.modules["critic"].parameters()) + list(self.modules["generator"].parameters())
        self.loss = make_loss("rpgan")
        self.penalty = make_penalty("r1r2", weight=R3GAN_CPU["penalty_weight"])
        self.draws, self.augment, self.through = None, None, False

    def _r3gan_step(self):
        """The trainer's critic step then its generator step (gpgan.train.step), no update."""
        critic, generator = self.modules["critic"], self.modules["generator"]
        y_real, y_fake = self.labels["real"], self.labels["fake"]
        with gpgan.no_grad():
            fake_data = generator(gpgan.Variable(self.z), y_fake).data
        real = gpgan.Variable(self.real, requires_grad=True)
        fake = gpgan.Variable(fake_data, requires_grad=True)
        d_real, d_fake = critic(real, y_real), critic(fake, y_fake)
        penalty, _, _ = self.penalty.evaluate(critic, real, fake, None, forward=((real, d_real), (fake, d_fake)))
        critic_loss = self.loss.critic_loss(d_real, d_fake) + penalty
        critic_grads = gpgan.grad(critic_loss, list(critic.parameters()))
        with gpgan.no_grad():
            d_real = critic(gpgan.Variable(self.real), y_real)
        generator_loss = self.loss.generator_loss(critic(generator(gpgan.Variable(self.z), y_fake), y_fake), d_real)
        generator_grads = gpgan.grad(generator_loss, list(generator.parameters()))
        return critic_loss.data + generator_loss.data, [g.data for g in critic_grads + generator_grads]

    def step(self):
        if self.name == "r3gan":
            return self._r3gan_step()
        critic = self.modules["critic"]
        augment = self.augment
        if self.name == "generator":
            fake = self.modules["generator"](gpgan.Variable(self.z))
            if augment is not None:
                fake = augment(fake, self.augment_draws[1])
            loss = self.loss.generator_loss(critic(fake))
        else:
            shared = self.penalty.shared_points if self.penalty is not None else None
            real_data, fake_data = self.real, self.fake
            if augment is not None and not self.through:  # as the trainer: augmented points
                with gpgan.no_grad():
                    real_data = augment(real_data, self.augment_draws[0]).data
                    fake_data = augment(fake_data, self.augment_draws[1]).data
            real = gpgan.Variable(real_data, requires_grad=shared == "real")
            seen_real, seen_fake = real, gpgan.Variable(fake_data)
            if augment is not None and self.through:
                seen_real, seen_fake = augment(real, self.augment_draws[0]), augment(seen_fake, self.augment_draws[1])
            d_real = critic(seen_real)
            loss = self.loss.critic_loss(d_real, critic(seen_fake))
            if self.penalty is not None:
                forward = (real, d_real) if shared == "real" else None
                value, _, _ = self.penalty.evaluate(critic, real, fake_data, self.draws, forward=forward)
                loss = loss + value
        grads = gpgan.grad(loss, self.params)
        return loss.data, [g.data for g in grads]

    def timed_step(self, graph):
        """The step to time: :meth:`step`, or with ``graph`` (CUDA) its CUDA graph's replay, which
        returns the same arrays each time. Sets ``self.captured``."""
        self.captured = None
        if not graph:
            return self.step
        self.captured = CapturedStep(self.step)
        self.captured.rehearse()  # eager first: kernels compiled, handles created
        self.captured.capture()
        return self.captured.replay


# -- the same workloads in PyTorch ------------------------------------------------------------------
def _torch_twin(module, torch):
    """A torch.nn module with the same architecture, parameter names and values as gpgan's ``module``."""
    import gpgan.nn as gnn

    nn = torch.nn

    def convert(m):
        if isinstance(m, gnn.Sequential):
            return nn.Sequential(*[convert(c) for c in m])
        if isinstance(m, gnn.Linear):
            return nn.Linear(m.in_features, m.out_features, bias=m.bias is not None)
        if isinstance(m, gnn.Conv2d):
            return nn.Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                             m.groups, bias=m.bias is not None)
        if isinstance(m, gnn.ConvTranspose2d):
            return nn.ConvTranspose2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                                      m.output_padding, m.groups, bias=m.bias is not None, dilation=m.dilation)
        if isinstance(m, (gnn.BatchNorm1d, gnn.BatchNorm2d)):
            cls = nn.BatchNorm1d if isinstance(m, gnn.BatchNorm1d) else nn.BatchNorm2d
            return cls(m.num_features, m.eps, m.momentum, m.affine)
        if isinstance(m, gnn.LeakyReLU):
            return nn.LeakyReLU(m.negative_slope)
        if isinstance(m, gnn.Flatten):
            return nn.Flatten(m.start_dim, m.end_dim)
        simple = {gnn.ReLU: nn.ReLU, gnn.Tanh: nn.Tanh, gnn.Identity: nn.Identity}
        if type(m) in simple:
            return simple[type(m)]()
        raise TypeError(f"no PyTorch twin for {type(m).__name__}")

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in module.named_children():
                setattr(self, name, convert(child))

        def forward(self, x):
            if isinstance(module, DCGANGenerator):
                h = torch.relu(self.bn0(self.linear(x)))
                return self.main(h.reshape(h.shape[0], module.top_channels, module.bottom, module.bottom))
            return (self.main if hasattr(self, "main") else self.net)(x)

    twin = Twin()
    twin.load_state_dict({k: torch.as_tensor(numpy.asarray(to_device(v, "cpu")).copy())
                          for k, v in module.state_dict().items()})
    return twin


def torch_r3gan_step(work, torch, device, dtype):
    """PyTorch's twin of the ``r3gan`` workload's step (scripts/torch_r3gan.py's networks), on
    copies of its weights, inputs and labels."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("torch_r3gan", os.path.join(SCRIPTS, "torch_r3gan.py"))
    nets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nets)
    TF = torch.nn.functional

    def tensor(a):
        return torch.as_tensor(numpy.asarray(to_device(a, "cpu"))).to(device)

    weights = {who: {n: tensor(p.data).to(dtype).requires_grad_(True) for n, p in work.modules[who].named_parameters()}
               for who in ("critic", "generator")}
    shape = (work.options["widths"], work.options["blocks"], work.options["group_size"])
    real, z = tensor(work.real).to(dtype), tensor(work.z).to(dtype)
    y_real, y_fake = (TF.one_hot(tensor(work.labels[k]).long(), work.classes).to(dtype) for k in ("real", "fake"))
    gamma = work.penalty.weight

    def critic(x, y):
        return nets.projection_critic(torch, x, y, weights["critic"], *shape)

    def generator(z, y):
        return nets.conditional_generator(torch, z, y, weights["generator"], *shape)

    def step():
        with torch.no_grad():
            fake = generator(z, y_fake)
        xr, xf = real.detach().requires_grad_(True), fake.detach().requires_grad_(True)
        d_real, d_fake = critic(xr, y_real), critic(xf, y_fake)
        gr, gf = torch.autograd.grad([d_real.sum(), d_fake.sum()], [xr, xf], create_graph=True)
        critic_loss = (TF.softplus(-(d_real - d_fake)).mean()
                       + gamma / 2 * (gr.square().flatten(1).sum(1).mean() + gf.square().flatten(1).sum(1).mean()))
        critic_grads = torch.autograd.grad(critic_loss, list(weights["critic"].values()))
        with torch.no_grad():
            d_real = critic(real, y_real)
        generator_loss = TF.softplus(-(critic(generator(z, y_fake), y_fake) - d_real)).mean()
        generator_grads = torch.autograd.grad(generator_loss, list(weights["generator"].values()))
        return (critic_loss + generator_loss).detach(), critic_grads + generator_grads

    return step


def torch_step(work, torch):
    """PyTorch's step for ``work``, on copies of its weights and inputs, on the same device."""
    import torch.nn.functional as TF

    device = "cuda" if work.device == "cuda" else "cpu"
    dtype = {numpy.dtype("float32"): torch.float32, numpy.dtype("float64"): torch.float64}[work.dtype]
    if work.name == "r3gan":
        return torch_r3gan_step(work, torch, device, dtype)
    modules = {k: _torch_twin(m, torch).to(device=device, dtype=dtype) for k, m in work.modules.items()}
    for m in modules.values():
        m.train()

    def tensor(a):
        return torch.as_tensor(numpy.asarray(to_device(a, "cpu"))).to(device)

    real, fake, z = tensor(work.real), tensor(work.fake), tensor(work.z)
    critic = modules["critic"]
    params = list(modules[work.trained].parameters())

    def input_gradient(x):
        x = x.detach().requires_grad_(True)
        g, = torch.autograd.grad(critic(x).sum(), [x], create_graph=True)
        return g.pow(2).flatten(1).sum(1)

    eps = tensor(work.draws["eps"]) if work.name == "wgangp" else None  # gpgan's interpolation weights

    def step():
        if work.name == "generator":
            loss = TF.softplus(-critic(modules["generator"](z))).mean()
        elif work.name == "wgangp":
            loss = critic(fake).mean() - critic(real).mean()
            sq = input_gradient(eps * real + (1 - eps) * fake)
            loss = loss + 10.0 * ((sq + 1e-12).sqrt() - 1.0).pow(2).mean()
        elif work.name in ("r1", "toy_r1"):  # one forward at the real batch for the loss and R1
            x = real.detach().requires_grad_(True)
            d_real = critic(x)
            loss = TF.softplus(-d_real).mean() + TF.softplus(critic(fake)).mean()
            g, = torch.autograd.grad(d_real.sum(), [x], create_graph=True)
            loss = loss + work.penalty.scale * g.pow(2).flatten(1).sum(1).mean()
        else:
            loss = TF.softplus(-critic(real)).mean() + TF.softplus(critic(fake)).mean()
        grads = torch.autograd.grad(loss, params)
        return loss, grads

    return step


# -- measuring ----------------------------------------------------------------------------------------
def _synchronizer(device, torch=None):
    if device != "cuda":
        return lambda: None
    if torch is not None:
        return torch.cuda.synchronize
    import cupy

    return cupy.cuda.Device().synchronize


def _jiffies():
    """(busy jiffies of the whole machine, jiffies of this process), from /proc; None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat", encoding="ascii") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    busy = sum(fields[:3]) + sum(fields[5:8])  # user nice system, irq softirq steal
    return busy, int(own[11]) + int(own[12])    # utime + stime


def foreign_load(before, after, wall_ms):
    """Share of the machine's cores that other processes used between two :func:`_jiffies` readings
    (0: this process had the machine alone). Jiffies are 10 ms, so short steps read coarsely."""
    if before is None or after is None:
        return None
    foreign = (after[0] - before[0]) - (after[1] - before[1])
    return max(foreign, 0) * 10.0 / (wall_ms * (os.cpu_count() or 1))


def time_interleaved(runners, steps, warmup, clean_fraction=0.05, budget_s=0.0, settle_s=0.0, turn=1):
    """Wall and process-CPU milliseconds of each runner's steps, interleaved in turns (the runners'
    order alternates every round), with the share of the machine other processes used during each
    step.

    ``turn``: steps a runner takes in a row. With ``turn`` > 1 the first step of each turn is run
    untimed and the next ``turn - 1`` are timed: back to back, as a training loop takes them, with
    the runner's data warm in the caches (on a machine whose last-level cache holds a whole step,
    another engine's step in between evicts it) and the other engine's spinning worker threads
    gone to sleep during the untimed step.

    A step is *clean* when other processes used less than ``clean_fraction`` of the machine's
    cores during it. With ``budget_s`` > 0, rounds go on past ``steps`` timed steps until every
    runner has ``steps`` clean steps or the budget is spent (for a machine shared with other work).

    ``settle_s``: a pause before every turn. BLAS and OpenMP worker threads spin for a while
    after their last parallel region (OpenBLAS up to about 0.1 s) before they sleep; without the
    pause the threads of the engine that ran last would compete for the cores with the next one.
    """
    for step, sync in runners.values():
        for _ in range(warmup):
            step()
        sync()
    times = {name: ([], [], []) for name in runners}
    names = list(runners)
    timed_per_turn = max(1, turn - 1)
    start = time.perf_counter()
    k = 0
    while True:
        for name in (names if k % 2 == 0 else names[::-1]):
            step, sync = runners[name]
            if settle_s:
                time.sleep(settle_s)
            if turn > 1:
                step()
                sync()
            for _ in range(timed_per_turn):
                j0 = _jiffies()
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                sync()
                wall = (time.perf_counter() - t0) * 1e3
                times[name][0].append(wall)
                times[name][1].append((time.process_time() - c0) * 1e3)
                times[name][2].append(foreign_load(j0, _jiffies(), wall))
        k += 1
        if k * timed_per_turn < steps:
            continue
        clean = min(len(_clean(t, clean_fraction)) for t in times.values())
        if budget_s <= 0 or clean >= steps or time.perf_counter() - start > budget_s:
            return times


def _clean(t, fraction):
    """Indexes of the steps during which other processes used less than ``fraction`` of the cores."""
    return [i for i, load in enumerate(t[2]) if load is not None and load < fraction]


def summary(times, clean_fraction=0.05):
    t, cpu = (numpy.asarray(v) for v in times[:2])
    out = {"median_ms": float(numpy.median(t)), "min_ms": float(t.min()), "max_ms": float(t.max()),
           "q25_ms": float(numpy.percentile(t, 25)), "q75_ms": float(numpy.percentile(t, 75)),
           "cpu_median_ms": float(numpy.median(cpu)), "cpu_min_ms": float(cpu.min()),
           "times_ms": [round(float(v), 3) for v in t]}
    if times[2] and times[2][0] is not None:
        clean = _clean(times, clean_fraction)
        out["foreign_load"] = [round(float(v), 3) for v in times[2]]
        out["clean_steps"] = len(clean)
        if clean:
            out["clean_median_ms"] = float(numpy.median(t[clean]))
    return out


def tracemalloc_peak(step):
    tracemalloc.start()
    tracemalloc.reset_peak()
    step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def cuda_pool_peak(step):
    """Peak of CuPy's default pool's used bytes during one step, through an allocator wrapper."""
    import cupy

    pool = cupy.get_default_memory_pool()
    peak = [pool.used_bytes()]

    def malloc(size):
        mem = pool.malloc(size)
        peak[0] = max(peak[0], pool.used_bytes())
        return mem

    cupy.cuda.set_allocator(malloc)
    try:
        step()
        cupy.cuda.Device().synchronize()
    finally:
        cupy.cuda.set_allocator(pool.malloc)
    return peak[0]


def _status_kib(field):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _workload(name, args, dtype, device):
    """The workload ``name`` (``W`` or its augmented twin ``W+kind``) as the command line asks."""
    base, _, augment = name.partition("+")
    return Workload(base, dtype, device, args.batch, augment=augment or "none", augment_p=args.augment_p,
                    through=args.augment_through)


def workload_names(args):
    """The workloads to time: the plain ones, each image workload's augmented twin after it."""
    names = []
    for name in args.workloads:
        names.append(name)
        if args.augment != "none" and name not in ("toy_r1", "r3gan"):
            names.append(f"{name}+{args.augment}")
    return names


def memory_child(args):
    """Run in a fresh process: build one workload for one engine, run steps, print resident sizes."""
    work = _workload(args.memory_child[0], args, args.dtype, "cpu")
    if args.memory_child[1] == "torch":
        import torch

        torch.set_num_threads(available_cores())
        step = torch_step(work, torch)
    else:
        step = work.step
    before = _status_kib("VmRSS")
    for _ in range(args.memory_steps):
        step()
    print(json.dumps({"peak_rss_mib": _status_kib("VmHWM") / 1024, "rise_mib": (_status_kib("VmHWM") - before) / 1024}))


def resident_peaks(name, args, engines):
    out = {}
    for engine in engines:
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", name, engine, "--dtype", args.dtype,
               "--memory-steps", str(args.memory_steps)]
        if args.batch:
            cmd += ["--batch", str(args.batch)]
        cmd += ["--augment-p", str(args.augment_p)] + (["--augment-through"] if args.augment_through else [])
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode:
            out[engine] = {"error": result.stderr.strip().splitlines()[-1:]}
        else:
            out[engine] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def float64_reference(name, args, device):
    """gpgan's gradients in float64 on the CPU, from the same weights and inputs."""
    _, grads = _workload(name, args, numpy.float64, "cpu").step()
    return grads


def relative_error(grads, reference):
    """||g - ref|| / ||ref|| over all weight gradients taken as one vector."""
    diff = sum(float(numpy.sum((numpy.asarray(g, numpy.float64) - r) ** 2)) for g, r in zip(grads, reference))
    return (diff / sum(float(numpy.sum(r ** 2)) for r in reference)) ** 0.5


def node_overhead(n=200_000):
    """Microseconds per ``a + b`` on one-element Variables: recorded, under no_grad, bare NumPy."""
    a = gpgan.Variable(numpy.ones(1, numpy.float32), requires_grad=True)
    b = gpgan.Variable(numpy.ones(1, numpy.float32), requires_grad=True)

    def per_call(add, x, y):
        t0 = time.perf_counter()
        for _ in range(n):
            add(x, y)
        return (time.perf_counter() - t0) / n * 1e6

    recorded = per_call(operator.add, a, b)
    with gpgan.no_grad():
        unrecorded = per_call(operator.add, a, b)
    bare = per_call(operator.add, a.data, b.data)
    return {"recorded_us": recorded, "no_grad_us": unrecorded, "numpy_us": bare}


def _host(a):
    return numpy.asarray(to_device(a, "cpu"))


def compiled_description():
    """Which convolution kernels run: Numba's (and its version) or NumPy's."""
    version = compiled_kernels_version()
    return f"Numba {version} kernels" if version else "NumPy kernels only"


def onednn_description():
    """Whether oneDNN runs the float32 convolutions and large products (and its version)."""
    version = onednn_version()
    return f"oneDNN {version} convolutions and products" if version else "no oneDNN"


def _openmp_wait():
    """How idle OpenMP threads (oneDNN's, Numba's, PyTorch's) wait, as the environment sets it."""
    if os.environ.get("OMP_WAIT_POLICY"):
        return f"wait policy {os.environ['OMP_WAIT_POLICY']} (OMP_WAIT_POLICY)"
    return f"idle spin {os.environ.get('GOMP_SPINCOUNT', 'libgomp default')} (GOMP_SPINCOUNT)"


def switch_states(args):
    """What ran, for scripts/ab_mechanisms.py to check: the accelerators' versions (None: not used),
    the process settings and the mechanisms turned off (gpgan.backend.mechanisms)."""
    return {"numba": compiled_kernels_version(), "onednn": onednn_version(),
            "blas_idles_briefly": args.process.blas_idles_briefly, "host_memory_kept": args.process.host_memory_kept,
            "openmp_spin": os.environ.get("GOMP_SPINCOUNT"), "openmp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "threads": get_num_threads(), "mechanisms_off": mechanisms.off.names()}


def bench_device(args, device, torch):
    works = {name: _workload(name, args, args.dtype, device) for name in workload_names(args)}
    if device == "cuda":
        import cupy

        machine = f"{device_description('cuda')}, CuPy {cupy.__version__}"
    else:
        machine = (f"{device_description('cpu')}, {available_cores()} available to this process; "
                   f"NumPy {numpy.__version__}, {blas_description()}; gpgan array passes on "
                   f"{get_num_threads()} thread(s) (GPGAN_NUM_THREADS); OpenBLAS's idle spin "
                   f"{'short' if args.process.blas_idles_briefly else 'long'} (OPENBLAS_THREAD_TIMEOUT); OpenMP's "
                   f"{_openmp_wait()}; freed host "
                   f"memory {'kept' if args.process.host_memory_kept else 'returned to the OS'} (GPGAN_KEEP_HOST_MEMORY); "
                   f"{compiled_description()} (GPGAN_NUMBA); {onednn_description()} (GPGAN_ONEDNN)")
        if mechanisms.off.names():
            machine += f"; turned off for this benchmark: {', '.join(mechanisms.off.names())} ({mechanisms.ENV})"
    report = {"device": device, "machine": machine, "python": sys.executable,
              "gpgan": os.path.dirname(os.path.abspath(gpgan.__file__)), "dtype": args.dtype,
              "steps": args.steps, "warmup": args.warmup, "workloads": {},
              "augment": {"type": args.augment, "p": args.augment_p, "through": args.augment_through}}
    if args.augment != "none":
        print(f"  augment: {args.augment}" + (f" at p = {args.augment_p:g}" if args.augment == "ada" else "")
              + (", R1 through it" if args.augment_through else ""))
    print(f"\n[{device}] {machine}")
    if torch is not None:
        report["torch"] = f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, TF32 off"
        print(f"  {report['torch']}; steps timed interleaved with gpgan's")
    if device == "cpu" and not args.no_overhead:
        report["node_overhead"] = oh = node_overhead()
        print(f"  node overhead: {oh['recorded_us']:.2f} us per recorded call, {oh['no_grad_us']:.2f} us under "
              f"no_grad, {oh['numpy_us']:.2f} us for NumPy's bare a + b")
    print(f"  {args.warmup} warmup + {args.steps} timed steps each, {args.dtype}; ms per step: median (min) "
          "[25%-75%], median process CPU time, and the median of the clean steps (their count), those during "
          f"which other processes used < {args.clean_fraction:.0%} of the cores")

    graph = device == "cuda" and not args.eager
    report["gpgan_cuda_graph"] = graph
    report["gpgan_matmul_precision"] = get_matmul_precision()
    if device == "cuda":
        print("  gpgan's steps " + ("captured once as CUDA graphs and replayed" if graph else "run eagerly (--eager)")
              + f", products in {get_matmul_precision()}")
    runners = {}
    checks = {}
    for name, work in works.items():
        step_g = work.timed_step(graph)
        runners[(name, "gpgan")] = (step_g, _synchronizer(device))
        entry = report["workloads"][name] = {"batch": work.batch}
        loss_g, grads_g = step_g()
        entry["loss"] = {"gpgan": float(_host(loss_g))}
        checks[name] = [grads_g]
        if torch is not None:
            step_t = torch_step(work, torch)
            runners[(name, "torch")] = (step_t, _synchronizer(device, torch))
            loss_t, grads_t = step_t()
            entry["loss"]["torch"] = float(loss_t.item())
            checks[name].append([g.detach().cpu().numpy() for g in grads_t])
    for name, grads in checks.items():
        entry = report["workloads"][name]
        if args.dtype == "float32":
            ref = float64_reference(name, args, device)
            entry["grad_error_vs_float64"] = {engine: relative_error([_host(g) for g in gs], ref)
                                              for engine, gs in zip(("gpgan", "torch"), grads)}
        if len(grads) == 2:
            ref = [numpy.asarray(g, numpy.float64) for g in grads[1]]
            entry["grad_difference_gpgan_torch"] = relative_error([_host(g) for g in grads[0]], ref)

    settle = args.settle if args.settle is not None else (0.2 if device == "cpu" and torch is not None else 0.0)
    report["settle_s"], report["turn"] = settle, args.turn
    times = time_interleaved(runners, args.steps, args.warmup, args.clean_fraction, args.budget, settle, args.turn)
    for name, work in works.items():
        entry = report["workloads"][name]
        entry["gpgan"] = summary(times[(name, "gpgan")], args.clean_fraction)
        if torch is not None:
            entry["torch"] = summary(times[(name, "torch")], args.clean_fraction)
            entry["ratio_median"] = entry["gpgan"]["median_ms"] / entry["torch"]["median_ms"]
            entry["ratio_min"] = entry["gpgan"]["min_ms"] / entry["torch"]["min_ms"]
            if "clean_median_ms" in entry["gpgan"] and "clean_median_ms" in entry["torch"]:
                entry["ratio_clean_median"] = entry["gpgan"]["clean_median_ms"] / entry["torch"]["clean_median_ms"]
        if device == "cpu":
            entry["tracemalloc_peak_mib"] = tracemalloc_peak(work.step) / 2 ** 20
            if not args.no_memory:
                entry["resident"] = resident_peaks(name, args, ["gpgan"] + (["torch"] if torch is not None else []))
        else:
            entry["cuda_pool_peak_mib"] = cuda_pool_peak(work.step) / 2 ** 20
            if work.captured is not None:
                entry["cuda_graph_pool_mib"] = work.captured.pool_bytes() / 2 ** 20
        base = name.partition("+")[0]
        if base != name:  # an augmented twin: its cost over the plain step, timed in the same turns
            plain = report["workloads"][base]["gpgan"]
            entry["augment_cost"] = {"median": entry["gpgan"]["median_ms"] / plain["median_ms"] - 1,
                                     "cpu_median": entry["gpgan"]["cpu_median_ms"] / plain["cpu_median_ms"] - 1}
        print_entry(name, entry)
    if args.profile:
        name = args.workloads[0]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.steps):
            works[name].step()
        _synchronizer(device)()
        profiler.disable()
        print(f"\n  cProfile of {args.steps} gpgan {name} steps (top {args.profile_top} by own time; on CUDA the "
              "host side, which bounds it):")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile_top)
    report["switches"] = switch_states(args)  # after the steps: a library that failed to load is off by now
    return report


def _ms(s):
    text = (f"{s['median_ms']:7.1f} ({s['min_ms']:.1f}) [{s['q25_ms']:.1f}-{s['q75_ms']:.1f}] "
            f"cpu {s['cpu_median_ms']:.0f}")
    if "clean_steps" in s:
        text += f" clean {s.get('clean_median_ms', float('nan')):.1f} ({s['clean_steps']})"
    return text


def print_entry(name, e):
    line = f"  {name:10s} gpgan {_ms(e['gpgan'])}"
    if "torch" in e:
        line += f" | torch {_ms(e['torch'])} | ratio {e['ratio_median']:.2f} (min {e['ratio_min']:.2f}"
        line += f", clean {e['ratio_clean_median']:.2f})" if "ratio_clean_median" in e else ")"
    if "augment_cost" in e:
        cost = e["augment_cost"]
        line += f" | over plain: {cost['median']:+.1%} median, {cost['cpu_median']:+.1%} CPU time"
    print(line)
    details = [f"loss {' / '.join(f'{v:.6g}' for v in e['loss'].values())}"]
    if "grad_error_vs_float64" in e:
        details.append("grad error vs float64 " + ", ".join(f"{k} {v:.1e}" for k, v in e["grad_error_vs_float64"].items()))
    if "grad_difference_gpgan_torch" in e:
        details.append(f"gpgan-torch {e['grad_difference_gpgan_torch']:.1e}")
    if "tracemalloc_peak_mib" in e:
        details.append(f"tracemalloc peak {e['tracemalloc_peak_mib']:.1f} MiB")
    if "cuda_pool_peak_mib" in e:
        details.append(f"CuPy pool peak {e['cuda_pool_peak_mib']:.1f} MiB (eager)")
    if "cuda_graph_pool_mib" in e:
        details.append(f"graph pool {e['cuda_graph_pool_mib']:.1f} MiB")
    for engine, r in e.get("resident", {}).items():
        if "error" in r:
            details.append(f"{engine} resident: failed {r['error']}")
        else:
            details.append(f"{engine} resident peak {r['peak_rss_mib']:.0f} MiB (+{r['rise_mib']:.0f} in steps)")
    print("             " + "; ".join(details))


def main(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                        help="'all' (default): the CPU, and CUDA when CuPy sees a GPU")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per workload and engine (median of these)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.0, metavar="SECONDS",
                        help="go on past --steps until each engine has --steps clean steps (other processes "
                             "used under --clean-fraction of the cores), for at most SECONDS")
    parser.add_argument("--clean-fraction", type=float, default=0.05)
    parser.add_argument("--settle", type=float, default=None, metavar="SECONDS",
                        help="pause before every turn so the other engine's spinning worker threads "
                             "go to sleep first (default: 0.2 on the CPU with --torch, else 0)")
    parser.add_argument("--turn", type=int, default=None, metavar="K",
                        help="steps an engine takes in a row: one untimed, then K-1 timed back to back, as "
                             "in training (default 4, with --augment 1; 1: one timed step per turn)")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: 64, toy_r1 256)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--augment", choices=["none", "diffaugment", "ada"], default="none",
                        help="augment the images the critic sees (gpgan.augment), as the trainer does")
    parser.add_argument("--augment-p", type=float, default=1.0, help="ada's probability (fixed)")
    parser.add_argument("--augment-through", action="store_true",
                        help="R1 at the un-augmented reals, through the augmentation")
    parser.add_argument("--eager", action="store_true",
                        help="CUDA: time gpgan's eager steps (default: each step captured as a CUDA graph "
                             "and replayed)")
    parser.add_argument("--precision", choices=["float32", "bf16"], default="float32",
                        help="CUDA: precision of gpgan's float32 products (bf16: bfloat16 operands, float32 "
                             "accumulation, as train.precision); PyTorch's stay float32")
    parser.add_argument("--torch", action="store_true",
                        help="also run PyTorch on the same steps, interleaved (optional; never a gpgan dependency)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE ('-': stdout)")
    parser.add_argument("--profile", action="store_true", help="cProfile the first workload's gpgan step")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--no-memory", action="store_true", help="skip the resident-memory child processes")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead measurement")
    parser.add_argument("--without", default="", metavar="NAMES",
                        help="benchmarks only: turn these CPU speed mechanisms off (comma-separated, of "
                             f"{', '.join(mechanisms.MECHANISMS)}; gpgan.backend.mechanisms, as {mechanisms.ENV})")
    parser.add_argument("--memory-steps", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=2, metavar=("WORKLOAD", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.without:  # before the first step; in the environment too, for the resident-memory children
        try:
            names = mechanisms.parse(",".join([os.environ.get(mechanisms.ENV, ""), args.without]))
        except ValueError as exc:
            parser.error(f"--without: {str(exc).partition(': ')[2]}")
        os.environ[mechanisms.ENV] = ",".join(names)
        mechanisms.set_off(names)
    # As gpgan-train does (restarting with OpenBLAS's settings); host memory kept for PyTorch's buffers alike.
    args.process = configure_process(restart=argv is None)
    if args.memory_child:
        return memory_child(args)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w.partition("+")[0] not in WORKLOADS]
    if unknown or not args.workloads:
        parser.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; accepted: {', '.join(WORKLOADS)}")
    devices = ["cpu"] if args.device == "cpu" else ["cuda"] if args.device == "cuda" else ["cpu"]
    if args.device == "all" and cupy_available():
        devices.append("cuda")
    if "cuda" in devices and not cupy_available():
        parser.error("--device cuda: CuPy with a CUDA GPU is not available")
    if args.torch and args.augment != "none":
        parser.error("--augment: PyTorch has no twin of gpgan's augmentations; leave out --torch")
    if args.turn is None:  # the twins' cost: step by step (see the module docstring)
        args.turn = 1 if args.augment != "none" else 4
    torch = None
    if args.torch:
        try:
            import torch
        except ImportError:
            print("PyTorch is not installed: --torch skipped")
        else:
            torch.set_num_threads(available_cores())
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
    reports = []
    for device in devices:
        with matmul_precision(args.precision if device == "cuda" else "float32"):
            reports.append(bench_device(args, device, torch))
    if args.json:
        text = json.dumps(reports, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
