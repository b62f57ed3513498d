#!/usr/bin/env python3
"""The fixtures of tests/test_gpt.c (issue #33's fidelity check): a 2-layer GPT with nanoGPT's module
names (bench/gpt.py, attention composed of matmul, mask and softmax), its initial state dict,
the logits of a batch, and 10 fp32 training steps with AdamW on fixed batches.

    /usr/bin/python3 tests/make_gpt_fixtures.py [--device cpu|cuda]

Config: n_layer 2, n_head 4, n_embd 32, block_size 16, vocab_size 65, dropout 0, bias True; seed 0;
GPT-2's init (N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0);
batches (4, 16) of token ids drawn from torch.randint; AdamW(lr 1e-3, betas (0.9, 0.99), eps 1e-8)
with weight decay 0.1 on the 2-D parameters and 0 on the others (nanoGPT's groups); TF32 off.
Writes tests/data/gpt_state.safetensors (the state dict, lm_head.weight included: tied to
transformer.wte.weight) and tests/data/gpt_io.safetensors:
  idx     int64 (4, 16)        the batch of the logits check
  logits  float32 (4, 16, 65)  the model's output on idx, before any step
  x, y    int64 (10, 4, 16)    each step's inputs and targets
  loss    float32 (10)         each step's cross-entropy, before its update
Runs unchanged under PyTorch 1.13 and 2.x."""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixture_io import save, start  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from gpt import GPT, Config, adamw  # noqa: E402

N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB, BATCH, STEPS = 2, 4, 32, 16, 65, 4, 10


def main():
    device, out = start(__doc__)
    model = GPT(Config(N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB)).to(device)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    idx = torch.randint(0, VOCAB, (BATCH, BLOCK), device=device)
    with torch.no_grad():
        logits = model(idx)
    x = torch.randint(0, VOCAB, (STEPS, BATCH, BLOCK), device=device)
    y = torch.randint(0, VOCAB, (STEPS, BATCH, BLOCK), device=device)
    opt = adamw(model, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, eps=1e-8)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[s]).view(-1, VOCAB), y[s].view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    print(f"PyTorch {torch.__version__} on {device}: loss {float(losses[0]):.5f} -> {float(losses[-1]):.5f}")
    save(state, os.path.join(out, "gpt_state.safetensors"))
    save({"idx": idx, "logits": logits, "x": x, "y": y, "loss": torch.stack(losses)},
         os.path.join(out, "gpt_io.safetensors"))


if __name__ == "__main__":
    main()
