"""Dirac-GAN (Mescheder et al. 2018, section 2): the paper's convergence findings must come out.

500 steps of step size 0.2 from (theta, psi) = (1, 1). Converged: final distance to (0, 0)
below 1e-2; not converged: above 0.1 (thresholds of scripts/dirac_gan.py).
"""
import importlib.util
import os

import numpy as np
import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "scripts", "dirac_gan.py")
_spec = importlib.util.spec_from_file_location("dirac_gan", _PATH)
dirac_gan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dirac_gan)

MODES = ("simultaneous", "alternating")


@pytest.fixture(scope="module")
def results():
    return dirac_gan.run_all(("gan", "wgan", "wgan_gp", "r1", "r2"), steps=500, lr=0.2, gamma=1.0, lam=1.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["gan", "wgan", "wgan_gp"])
def test_unregularized_and_wgan_gp_do_not_converge(results, method, mode):
    assert dirac_gan.final_distance(results[method, mode]) > dirac_gan.DIVERGED


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["r1", "r2"])
def test_r1_and_r2_converge(results, method, mode):
    assert dirac_gan.final_distance(results[method, mode]) < dirac_gan.CONVERGED


def test_simultaneous_gan_spirals_out_and_alternating_cycles(results):
    """The paper's Lemma 2.3-2.4 picture: simultaneous GD moves away from (0, 0), alternating GD
    stays near the starting radius sqrt(2)."""
    sim, alt = results["gan", "simultaneous"], results["gan", "alternating"]
    start = np.hypot(1.0, 1.0)
    assert dirac_gan.final_distance(sim) > 1.5 * start
    radius = np.hypot(*alt.T)
    assert radius.min() > 0.5 * start and radius.max() < 1.5 * start


def test_first_step_matches_the_closed_form_vector_field():
    """One simultaneous step of the zero-sum GAN with R1: v = (-psi f'(theta psi),
    theta f'(theta psi) - gamma psi), f'(t) = sigmoid(-t), from gpgan's double backward."""
    gamma, lr = 0.7, 0.2
    trajectory = dirac_gan.simulate("r1", "simultaneous", steps=1, lr=lr, weight=gamma)
    theta, psi = 1.0, 1.0
    fprime = 1.0 / (1.0 + np.exp(theta * psi))
    expected = (theta - lr * psi * fprime, psi + lr * (theta * fprime - gamma * psi))
    np.testing.assert_allclose(trajectory[1], expected, rtol=1e-12)


def test_script_writes_table_and_plots(tmp_path):
    assert dirac_gan.main(["--out", str(tmp_path), "--steps", "20", "--methods", "gan", "r1"]) == 0
    names = set(os.listdir(tmp_path))
    assert {"results.csv", "results.md", "distance_simultaneous.png", "distance_alternating.png",
            "trajectory_gan.png", "trajectory_r1.png"} <= names
    rows = (tmp_path / "results.csv").read_text().strip().splitlines()
    assert rows[0].startswith("method,") and len(rows) == 3
