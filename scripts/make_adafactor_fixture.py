#!/usr/bin/env python3
"""Writes the 10-step torch.optim.Adafactor trajectory that tests/optim/adafactor_test.cpp compares
strata's Adafactor against (a tolerance, not the bits: strata sums in double in its own order).

Usage (needs PyTorch >= 2.5; CPU is enough):
    python3 scripts/make_adafactor_fixture.py tests/optim/fixtures/adafactor_trajectory.json

Four cases, each one tensor trained alone for 10 steps with the learning rate set per step:
a (5, 7) matrix and a (7,) vector, each with weight_decay 0 and 0.1; every value is written as
float.hex of the float32 value (exact), the hyperparameters and torch's version beside them.
"""
import json
import sys

import torch


def hexes(t):
    return [float(x).hex() for x in t.detach().double().flatten().tolist()]


def main(out_path):
    torch.manual_seed(0)
    lrs = [1e-2, 2e-2, 5e-2, 0.5, 0.3, 1e-2, 1e-3, 0.2, 0.1, 0.05]  # crosses 1/sqrt(t) both ways
    hp = {"beta2_decay": -0.8, "eps1": None, "eps2": 1e-3, "d": 1.0}
    cases = []
    for name, shape in (("matrix", (5, 7)), ("vector", (7,))):
        p0 = (torch.randn(*shape) * 0.5).float()
        grads = (torch.randn(10, *shape) * 0.3).float()
        grads[..., -1] *= 1e-5  # a tiny last column / element: the eps1 floors matter
        for wd in (0.0, 0.1):
            p = torch.nn.Parameter(p0.clone())
            opt = torch.optim.Adafactor([p], lr=lrs[0], beta2_decay=hp["beta2_decay"], eps=(hp["eps1"], hp["eps2"]),
                                        d=hp["d"], weight_decay=wd, foreach=False)
            for t in range(10):
                for group in opt.param_groups:
                    group["lr"] = lrs[t]
                p.grad = grads[t].clone()
                opt.step()
            state = opt.state[p]
            expected = {"param": hexes(p)}
            for key in ("row_var", "col_var", "variance"):
                if state.get(key) is not None:
                    expected[key] = hexes(state[key])
            cases.append({"name": f"{name}, weight_decay {wd}", "shape": list(shape), "weight_decay": wd,
                          "p0": hexes(p0), "grads": [hexes(g) for g in grads], "expected": expected})
    fixture = {"generator": "scripts/make_adafactor_fixture.py", "torch_version": torch.__version__,
               "hparams": hp, "lrs": lrs, "steps": 10, "cases": cases}
    with open(out_path, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
