"""Write tests/fixtures/prdc_reference.npz: density and coverage as Naeem et al.'s own ``prdc``
package computes them, for tests/test_metrics_scores.py (run once, in an environment with prdc).

    /work/compare-venv/bin/pip install prdc
    /work/compare-venv/bin/python scripts/make_prdc_fixture.py [--out tests/fixtures]

Two pairs of feature sets: Gaussian (real 200 x 16, generated 150 x 16, shifted and wider) and
points on an integer grid (real 120 x 3, generated 100 x 3), where many distances equal a radius
exactly, so the file also pins prdc's strict comparison. For each pair and k in 1, 3, 5 it keeps
prdc's density and coverage. gpgan never imports prdc; this script is the only place the numbers
come from.
"""
import argparse
import importlib.metadata
import os

import numpy as np
import prdc

KS = (1, 3, 5)


def feature_pairs():
    rng = np.random.default_rng(2020)
    gauss = (rng.standard_normal((200, 16)), rng.standard_normal((150, 16)) * 1.3 + 0.2)
    grid = (rng.integers(0, 3, (120, 3)).astype(np.float64), rng.integers(0, 3, (100, 3)).astype(np.float64))
    return {"gauss": gauss, "grid": grid}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    args = parser.parse_args()
    arrays = {"ks": np.array(KS), "prdc_version": np.array(importlib.metadata.version("prdc"))}
    for name, (real, fake) in feature_pairs().items():
        arrays[f"{name}_real"], arrays[f"{name}_fake"] = real, fake
        results = [prdc.compute_prdc(real, fake, k) for k in KS]
        arrays[f"{name}_density"] = np.array([r["density"] for r in results])
        arrays[f"{name}_coverage"] = np.array([r["coverage"] for r in results])
    path = os.path.join(args.out, "prdc_reference.npz")
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}: " + ", ".join(f"{n} density {arrays[n + '_density']} coverage {arrays[n + '_coverage']}"
                                        for n in ("gauss", "grid")))


if __name__ == "__main__":
    main()
