"""Write the tiny ``torch.save`` fixtures of tests/test_metrics_torch_file.py (run once, with torch).

    /work/compare-venv/bin/python scripts/make_torch_fixtures.py [--out tests/fixtures]

Both files hold the same state dict, one in each of torch's formats: ``torch_state_zip.pt`` (the
zip archive of torch >= 1.6) and ``torch_state_legacy.pt`` (the pickle stream of torch < 1.6,
``_use_new_zipfile_serialization=False``, the format of pytorch-fid's 2019 Inception weights).
It is a real ``state_dict()`` of a conv + batch-norm pair (with its ``_metadata``), its values
replaced by the formulas the test recomputes, plus tensors that exercise the reader: a transposed
view and an offset slice sharing one storage, float64, float16, bfloat16, bool and empty tensors.
gpgan never imports torch; this script is the only place the fixtures come from.
"""
import argparse
import os

import torch


def fixture_state_dict():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3, bias=False), torch.nn.BatchNorm2d(2, eps=1e-3))
    sd = model.state_dict()
    with torch.no_grad():
        sd["0.weight"].copy_(torch.arange(54, dtype=torch.float32).reshape(2, 3, 3, 3) / 8 - 3)
        sd["1.weight"].copy_(torch.tensor([1.5, 0.5]))
        sd["1.bias"].copy_(torch.tensor([-0.25, 0.75]))
        sd["1.running_mean"].copy_(torch.tensor([0.125, -2.0]))
        sd["1.running_var"].copy_(torch.tensor([4.0, 0.0625]))
        sd["1.num_batches_tracked"].fill_(7)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5
    sd["extra.transposed"] = base.t()          # strides (1, 4)
    sd["extra.slice"] = base[1:]               # offset 4 into the same storage
    sd["extra.double"] = torch.linspace(-1, 1, 5, dtype=torch.float64)
    sd["extra.half"] = torch.tensor([1.5, -2.0, 65504.0], dtype=torch.float16)
    sd["extra.bfloat16"] = torch.tensor([1.5, -2.0, 3.0e38], dtype=torch.bfloat16)
    sd["extra.bool"] = torch.tensor([True, False, True])
    sd["extra.empty"] = torch.zeros(0, 3)
    return sd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sd = fixture_state_dict()
    torch.save(sd, os.path.join(args.out, "torch_state_zip.pt"))
    torch.save(sd, os.path.join(args.out, "torch_state_legacy.pt"), _use_new_zipfile_serialization=False)
    for name in ("torch_state_zip.pt", "torch_state_legacy.pt"):
        path = os.path.join(args.out, name)
        back = torch.load(path)
        assert all(torch.equal(back[k], v) for k, v in sd.items()), name
        print(f"{path}: {os.path.getsize(path)} bytes, {len(sd)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
