#!/usr/bin/env python3
"""Fixtures for tests/test_rnn.c: PyTorch's nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on odd sizes,
with every output and every gradient.

    /usr/bin/python3 tests/make_rnn_fixtures.py                  # float32 (CPU): tests/data/rnn.safetensors
    python3 tests/make_rnn_fixtures.py --device cuda             # also tests/data/rnn_f16.safetensors

Four cases, each under its prefix in one file:
  lstm.       nn.LSTM(7, 5, num_layers=2, batch_first=True, bidirectional=True), input (3, 4, 7), h0 and c0
              (4, 3, 5) given; outputs output (3, 4, 10), h_n, c_n (4, 3, 5)
  gru.        nn.GRU(5, 7, num_layers=2), input (6, 2, 5), no h0 (zeros); outputs output (6, 2, 7),
              h_n (2, 2, 7)
  lstm_cell.  nn.LSTMCell(7, 5), input (3, 7), h and c (3, 5); outputs h_out, c_out (3, 5)
  gru_cell.   nn.GRUCell(5, 7), input (3, 5), h (3, 7); output h_out (3, 7)
Per case: the inputs (input, h0, c0 / h, c), the parameters under their PyTorch names (weight_ih_l0, ...),
the outputs, the gradient fed to each output ("dy.<output>"; the loss is the sum of output * dy over the
outputs), and the gradient of every input and parameter ("grad.<name>"). Everything float32 from
torch.manual_seed(0), computed on the CPU, dropout 0. The files are written in the safetensors
format by fixture_io.save (torch alone is needed).

With --device cuda, rnn_f16.safetensors holds the same cases with the module and inputs in float16 on
the GPU (PyTorch runs cuDNN in half precision there): inputs, parameters, dy's rounded to float16 from
the float32 ones, and PyTorch's float16 outputs and gradients. Runs under PyTorch 1.13 and 2.x."""
import argparse
import os

import torch
from fixture_io import save

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def cases():
    """(prefix, module, inputs {name: tensor}, call(module, inputs) -> {output name: tensor})"""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(7, 5, num_layers=2, batch_first=True, bidirectional=True)
    x = torch.randn(3, 4, 7)
    h0, c0 = torch.randn(4, 3, 5), torch.randn(4, 3, 5)

    def call_lstm(m, i):
        y, (h, c) = m(i["input"], (i["h0"], i["c0"]))
        return {"output": y, "h_n": h, "c_n": c}

    gru = torch.nn.GRU(5, 7, num_layers=2)
    xg = torch.randn(6, 2, 5)

    def call_gru(m, i):
        y, h = m(i["input"])
        return {"output": y, "h_n": h}

    lcell = torch.nn.LSTMCell(7, 5)
    xl, hl, cl = torch.randn(3, 7), torch.randn(3, 5), torch.randn(3, 5)

    def call_lcell(m, i):
        h, c = m(i["input"], (i["h"], i["c"]))
        return {"h_out": h, "c_out": c}

    gcell = torch.nn.GRUCell(5, 7)
    xc, hc = torch.randn(3, 5), torch.randn(3, 7)

    def call_gcell(m, i):
        return {"h_out": m(i["input"], i["h"])}

    return [("lstm", lstm, {"input": x, "h0": h0, "c0": c0}, call_lstm),
            ("gru", gru, {"input": xg}, call_gru),
            ("lstm_cell", lcell, {"input": xl, "h": hl, "c": cl}, call_lcell),
            ("gru_cell", gcell, {"input": xc, "h": hc}, call_gcell)]


def run(prefix, module, inputs, call, dtype, device, dys=None):
    """The case's tensors in dtype on device; dys: the output gradients to use (else drawn)."""
    module = module.to(device=device, dtype=dtype)
    ins = {k: v.to(device=device, dtype=dtype).requires_grad_(True) for k, v in inputs.items()}
    outs = call(module, ins)
    if dys is None:
        g = torch.Generator().manual_seed(1)
        dys = {k: torch.randn(v.shape, generator=g) for k, v in outs.items()}
    dys_dev = {k: v.to(device=device, dtype=dtype) for k, v in dys.items()}
    loss = sum((outs[k] * dys_dev[k]).sum() for k in outs)
    loss.backward()
    t = {}
    for k, v in ins.items():
        t[k] = v.detach()
        t["grad." + k] = v.grad
    for k, v in module.named_parameters():
        t[k] = v.detach()
        t["grad." + k] = v.grad
    for k, v in outs.items():
        t[k] = v.detach()
        t["dy." + k] = dys_dev[k]
    return {f"{prefix}.{k}": v.detach().cpu().contiguous() for k, v in t.items()}, dys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(1)
    f32, dys = {}, {}
    for prefix, module, inputs, call in cases():
        t, dys[prefix] = run(prefix, module, inputs, call, torch.float32, "cpu")
        f32.update(t)
    save(f32, os.path.join(DATA, "rnn.safetensors"))
    if a.device == "cuda":
        f16 = {}
        for prefix, module, inputs, call in cases():  # the same seeds: the same values, rounded
            t, _ = run(prefix, module, inputs, call, torch.float16, "cuda", dys[prefix])
            f16.update(t)
        save(f16, os.path.join(DATA, "rnn_f16.safetensors"))


if __name__ == "__main__":
    main()
