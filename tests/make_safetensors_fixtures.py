#!/usr/bin/env python3
"""Fixtures for tests/test_safetensors.c: checkpoints written by PyTorch through
safetensors.torch.save_file(model.state_dict(), path), with an input and PyTorch's output for it.

    python3 tests/make_safetensors_fixtures.py            # rewrite the fixtures, then check below
    python3 tests/make_safetensors_fixtures.py --check    # only check the cgrad-written file

Writes into tests/data/:
  st_linear.safetensors      nn.Linear(10, 1) (torch.manual_seed(0))
  st_linear_io.safetensors   "input" (4, 10) and "output" (4, 1) = model(input)
  st_mlp.safetensors         Sequential(Linear(32, 64), ReLU, Linear(64, 8)) (torch.manual_seed(1))
  st_mlp_io.safetensors      "input" (5, 32) and "output" (5, 8); every hidden pre-activation is at
                             least 1e-3 away from ReLU's kink
  st_linear_f64.safetensors  the Linear's state_dict in float64 (cgrad loads it only when asked to
                             convert: CG_SAFETENSORS_CONVERT)
(tests/make_torch_dtype_fixtures.py writes the fixture of the other dtypes.)

Then, when tests/data/st_mlp_cgrad.safetensors exists (a file cgrad wrote: test_safetensors loads
st_mlp.safetensors into a cgrad model and checks that saving it gives exactly this file; to rewrite
it, run the test with CG_SAFETENSORS_EXPORT=<path>), checks that PyTorch loads it: the same tensors,
bit for bit, as st_mlp.safetensors, load_state_dict(strict=True) into the Sequential, and the same
output for the input. Needs torch and safetensors (Debian python3-torch 1.13 is enough)."""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def path(name):
    return os.path.join(DATA, name)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def state(model):
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}


def write():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lin = torch.nn.Linear(10, 1)
    x = torch.rand(4, 10) * 2 - 1
    with torch.no_grad():
        y = lin(x)
    save_file(state(lin), path("st_linear.safetensors"))
    save_file({"input": x, "output": y.contiguous()}, path("st_linear_io.safetensors"))
    save_file({k: v.double() for k, v in state(lin).items()}, path("st_linear_f64.safetensors"))

    torch.manual_seed(1)
    m = mlp()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        while True:  # inputs whose hidden pre-activations all keep clear of ReLU's kink
            x = torch.rand(5, 32, generator=g) * 2 - 1
            if m[0](x).abs().min().item() >= 1e-3:
                break
        y = m(x)
    save_file(state(m), path("st_mlp.safetensors"))
    save_file({"input": x, "output": y.contiguous()}, path("st_mlp_io.safetensors"))
    print("wrote", DATA)


def check_cgrad_file():
    f = path("st_mlp_cgrad.safetensors")
    if not os.path.exists(f):
        print("no", f, "(run test_safetensors with CG_SAFETENSORS_EXPORT to write one): nothing to check")
        return
    got = load_file(f)
    ref = load_file(path("st_mlp.safetensors"))
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    for k in ref:
        assert got[k].dtype == torch.float32 and got[k].shape == ref[k].shape, k
        assert torch.equal(got[k].view(torch.int32), ref[k].view(torch.int32)), k
    with safe_open(f, framework="pt") as sf:
        assert sf.metadata() == {"format": "pt"}, sf.metadata()
    m = mlp()
    m.load_state_dict(got, strict=True)
    io = load_file(path("st_mlp_io.safetensors"))
    with torch.no_grad():
        y = m(io["input"])
    assert torch.equal(y, io["output"]), (y - io["output"]).abs().max()
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
    assert n % 8 == 0, n
    print("PyTorch loads", f, "(cgrad-written): tensors bit-identical, same output")


if __name__ == "__main__":
    if "--check" not in sys.argv[1:]:
        write()
    check_cgrad_file()
