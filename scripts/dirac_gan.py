#!/usr/bin/env python3
"""Dirac-GAN (Mescheder, Geiger & Nowozin 2018, "Which Training Methods for GANs do actually
Converge?", section 2), computed with gpgan's engine and gpgan.losses.

The generator is a point mass at ``theta``, the real data a point mass at 0 and the
discriminator linear, ``D_psi(x) = psi * x``. The paper's objective is
``L(theta, psi) = f(psi * theta) + f(0)`` with ``f(t) = -log(1 + exp(-t))``: the discriminator
maximizes it, the generator minimizes it. The unique equilibrium is ``(theta, psi) = (0, 0)``.

Conventions. The paper's ``f(D(fake)) + f(-D(real))`` scores fakes high; gpgan's losses score
reals high. So the paper's ``D_psi(x) = psi * x`` is gpgan's critic ``x -> -psi * x``: with it the
``non_saturating`` critic loss is exactly ``-L(theta, psi)``, the ``wgan`` critic loss is
``-psi * theta`` (``f(t) = t``), and trajectories are in the paper's coordinates (start (1, 1)).
As in the paper the game is zero-sum: the generator minimizes ``L`` (minus the critic's loss).
The ``*_ns`` methods let the generator minimize gpgan's non-saturating loss
``softplus(-D(theta))`` instead, whose gradient at the equilibrium is the same; away from it the
unregularized non-saturating GAN ends on a limit cycle instead of spiralling out. WGAN clips ``psi`` to
[-1, 1] (its Lipschitz constraint, as the paper does). Penalties go through
``gpgan.losses.make_penalty`` with the critic as a closure; every gradient comes from gpgan.grad
(the penalties' through a double backward).

Training: 500 steps of gradient descent with step 0.2 from (1, 1), both simultaneous (both
players use the current point) and alternating (critic first, then the generator against the
updated critic). Defaults: gamma = 1 for the zero-centred penalties (R1, R2, zero-GP; applied as
gamma / 2 * psi^2 since grad_x D = psi everywhere) and lambda = 1 for the one-centred ones
(WGAN-GP, DRAGAN, LP). A run counts as converged when its final distance to (0, 0) is below
1e-2, as not converged when it is above 0.1.

Run ``python scripts/dirac_gan.py --out experiments/dirac_gan`` for the trajectory plots
(PNG) and the table (results.md, results.csv) of final distances.
"""
import csv
import os
import sys
from collections import namedtuple

import numpy as np

try:
    import gpgan
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gpgan
import gpgan.functions as F
from gpgan.cli._args import Parser
from gpgan import Variable
from gpgan.losses import make_loss, make_penalty
from gpgan.viz import PALETTE, line_plot, scatter_plot

Method = namedtuple("Method", "loss penalty weight clip zero_sum")

# zero_sum: the generator minimizes the paper's L itself (minus the critic's loss), as in the
# paper; otherwise it minimizes gpgan's generator loss (non-saturating for non_saturating).
METHODS = {
    "gan": Method("non_saturating", "none", 0.0, None, True),
    "gan_ns": Method("non_saturating", "none", 0.0, None, False),
    "wgan": Method("wgan", "none", 0.0, 1.0, True),
    "wgan_gp": Method("wgan", "wgan_gp", 1.0, None, True),
    "r1": Method("non_saturating", "r1", 1.0, None, True),
    "r1_ns": Method("non_saturating", "r1", 1.0, None, False),
    "r2": Method("non_saturating", "r2", 1.0, None, True),
    "zero_gp": Method("non_saturating", "zero_gp", 1.0, None, True),
    "dragan": Method("non_saturating", "dragan", 1.0, None, True),
    "lp": Method("wgan", "lp", 1.0, None, True),
}
MODES = ("simultaneous", "alternating")
CONVERGED, DIVERGED = 1e-2, 0.1


def simulate(method, mode="simultaneous", steps=500, lr=0.2, start=(1.0, 1.0), weight=None, seed=0):
    """Train the Dirac-GAN; returns the trajectory, a float64 array (steps + 1, 2) of (theta, psi).

    Args:
        method: a key of :data:`METHODS` (loss, penalty, default weight, clipping).
        mode: "simultaneous" or "alternating" gradient descent.
        weight: the penalty weight (gamma or lambda); None for the method's default.
    """
    if method not in METHODS:
        raise ValueError(f"dirac_gan: unknown method {method!r}; accepted: {', '.join(METHODS)}")
    if mode not in MODES:
        raise ValueError(f"dirac_gan: unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    spec = METHODS[method]
    loss = make_loss(spec.loss)
    penalty = make_penalty(spec.penalty, weight=spec.weight if weight is None else weight)
    rng = np.random.default_rng(seed)
    theta = Variable(np.array(float(start[0])), requires_grad=True)
    psi = Variable(np.array(float(start[1])), requires_grad=True)
    real = np.zeros((1, 1))

    def critic(x):  # the paper's D_psi(x) = psi * x, in gpgan's "real is high" convention
        return -psi * x

    def critic_gradient():
        fake = theta.data.reshape(1, 1)  # detached: the critic's step does not reach theta
        value = loss.critic_loss(critic(Variable(real)), critic(Variable(fake)))
        if spec.penalty != "none":
            value = value + penalty(critic, real, fake, rng=rng)[0]
        return gpgan.grad(value, psi)[0].data

    def generator_gradient():
        fake_logits = critic(F.reshape(theta, (1, 1)))
        if spec.zero_sum:  # minimize L = -(critic loss); the real term does not depend on theta
            value = -loss.critic_loss(critic(Variable(real)), fake_logits)
        else:
            value = loss.generator_loss(fake_logits)
        return gpgan.grad(value, theta)[0].data

    def clip(value):
        return value if spec.clip is None else np.clip(value, -spec.clip, spec.clip)

    trajectory = np.empty((steps + 1, 2))
    trajectory[0] = theta.data, psi.data
    for step in range(1, steps + 1):
        if mode == "simultaneous":
            g_psi, g_theta = critic_gradient(), generator_gradient()
            psi.data = clip(psi.data - lr * g_psi)
            theta.data = theta.data - lr * g_theta
        else:
            psi.data = clip(psi.data - lr * critic_gradient())
            theta.data = theta.data - lr * generator_gradient()
        trajectory[step] = theta.data, psi.data
    return trajectory


def final_distance(trajectory):
    """Euclidean distance of the last point to the equilibrium (0, 0)."""
    return float(np.hypot(*trajectory[-1]))


def run_all(methods=tuple(METHODS), steps=500, lr=0.2, gamma=1.0, lam=1.0):
    """Every method under both modes: {(method, mode): trajectory}."""
    out = {}
    for name in methods:
        spec = METHODS[name]
        weight = None if spec.penalty == "none" else (gamma if spec.penalty in ("r1", "r2", "zero_gp") else lam)
        for mode in MODES:
            out[name, mode] = simulate(name, mode, steps=steps, lr=lr, weight=weight)
    return out


def verdict(distance):
    if distance < CONVERGED:
        return "converges"
    if distance > DIVERGED:
        return "does not converge"
    return "undecided"


def write_outputs(results, out_dir, gamma, lam, steps, lr):
    os.makedirs(out_dir, exist_ok=True)
    methods = list(dict.fromkeys(name for name, _ in results))
    rows = []
    for name in methods:
        spec = METHODS[name]
        weight = "-" if spec.penalty == "none" else (gamma if spec.penalty in ("r1", "r2", "zero_gp") else lam)
        game = "zero-sum" if spec.zero_sum else "gpgan generator loss"
        d = {mode: final_distance(results[name, mode]) for mode in MODES}
        rows.append([name, spec.loss, game, spec.penalty, weight, d["simultaneous"], d["alternating"],
                     verdict(d["simultaneous"]), verdict(d["alternating"])])
    header = ["method", "loss", "game", "penalty", "weight", "dist_simultaneous", "dist_alternating",
              "simultaneous", "alternating"]
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    lines = [f"Dirac-GAN, {steps} steps of step size {lr} from (theta, psi) = (1, 1); final distance to (0, 0) "
             f"(converges: < {CONVERGED:g}, does not converge: > {DIVERGED:g}).", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join([r[0], r[1], r[2], r[3], str(r[4]), f"{r[5]:.3g}", f"{r[6]:.3g}", r[7], r[8]]) + " |")
    with open(os.path.join(out_dir, "results.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")

    steps_axis = np.arange(steps + 1)
    for mode in MODES:
        series = [(name, steps_axis, np.log10(np.maximum(np.hypot(*results[name, mode].T), 1e-30)), None)
                  for name in methods]
        line_plot(os.path.join(out_dir, f"distance_{mode}.png"), series, "step", "log10 distance to (0, 0)",
                  title=f"Dirac-GAN, {mode} gradient descent")
    for name in methods:
        sets = [(results[name, mode], PALETTE[k], mode) for k, mode in enumerate(MODES)]
        sets.append((np.array([[1.0, 1.0]]), (0, 0, 0), "start"))
        sets.append((np.array([[0.0, 0.0]]), (214, 39, 40), "equilibrium"))
        scatter_plot(os.path.join(out_dir, f"trajectory_{name}.png"), sets,
                     title=f"Dirac-GAN {name}: trajectories from (1, 1)", xlabel="theta", ylabel="psi")
    return "\n".join(lines)


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join("experiments", "dirac_gan"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--gamma", type=float, default=1.0, help="weight of R1, R2, zero-GP (gamma / 2 convention)")
    parser.add_argument("--lam", type=float, default=1.0, help="weight of WGAN-GP, DRAGAN, LP")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    results = run_all(args.methods, steps=args.steps, lr=args.lr, gamma=args.gamma, lam=args.lam)
    print(write_outputs(results, args.out, args.gamma, args.lam, args.steps, args.lr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
