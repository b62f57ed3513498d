#!/usr/bin/env python3
"""PyTorch side of examples/train_gpt.c for issue #33's quality comparison: nanoGPT's train.py loop on the
characters of a text (by default the Shakespeare corpus, nanoGPT's shakespeare_char config), with the
C program's flags and its `step N: train loss .., val loss ..` and `result work=gpt_char_... val_loss=<best>
tokens_per_s=...` lines, so the two can be compared seed against seed.

The same data as the C program: the first --limit bytes (0: all) of the file, the vocabulary its sorted
distinct bytes (over the whole file), the first 90% for training and the rest for validation, batches of
random windows (torch.randint, as nanoGPT; the C program draws from cgrad's generator, so the runs match
in distribution, not batch for batch). The model is bench/gpt.py (SDPA attention with dropout, as
nanoGPT's flash path); AdamW with nanoGPT's decay groups (fused on the GPU), linear warm-up then cosine to
--min-lr at --lr-decay-iters, clip_grad_norm_, --amp bf16 autocast; evaluation every --eval-interval
steps over --eval-iters batches of each split, in eval mode."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from gpt import GPT, Config, adamw

HERE = os.path.dirname(os.path.abspath(__file__))


def lr_at(a, it):
    """nanoGPT's get_lr: linear warm-up, cosine decay to min_lr, then min_lr."""
    if it < a.warmup_iters:
        return a.lr * (it + 1) / (a.warmup_iters + 1)
    if it > a.lr_decay_iters:
        return a.min_lr
    ratio = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus = os.path.join(HERE, "..", ".deps", "shakespeare", "shakespeare.txt")  # scripts/fetch_shakespeare.sh
    ap.add_argument("--data", default=os.environ.get("CGRAD_SHAKESPEARE", corpus))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in (("n-layer", 6), ("n-head", 6), ("n-embd", 384), ("block-size", 256), ("batch", 64),
                          ("max-iters", 5000), ("warmup-iters", 100), ("lr-decay-iters", 5000),
                          ("eval-interval", 250), ("eval-iters", 200), ("limit", 0), ("seed", 1337)):
        ap.add_argument("--" + name, type=int, default=default)
    for name, default in (("dropout", 0.2), ("lr", 1e-3), ("min-lr", 1e-4), ("weight-decay", 0.1),
                          ("beta2", 0.99), ("grad-clip", 1.0)):
        ap.add_argument("--" + name, type=float, default=default)
    ap.add_argument("--amp", choices=["bf16"], help="forward and loss under bfloat16 autocast")
    ap.add_argument("--no-bias", action="store_true", help="Linear and LayerNorm without biases")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with open(a.data, "rb") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {b: i for i, b in enumerate(chars)}
    used = text[:a.limit] if 0 < a.limit < len(text) else text
    ids = torch.tensor([stoi[b] for b in used], dtype=torch.long)
    n_train = len(ids) * 9 // 10
    splits = {"train": ids[:n_train], "val": ids[n_train:]}
    torch.manual_seed(a.seed)
    c = Config(a.n_layer, a.n_head, a.n_embd, a.block_size, len(chars), bias=not a.no_bias,
               sdpa=hasattr(F, "scaled_dot_product_attention"), dropout=a.dropout)
    model = GPT(c).to(device)
    opt = adamw(model, lr=a.lr, betas=(0.9, a.beta2), weight_decay=a.weight_decay,
                **({"fused": True} if device.type == "cuda" else {}))
    run = torch.compile(model) if a.compile else model

    def batch(split):
        data = splits[split]
        ix = torch.randint(len(data) - a.block_size, (a.batch,))
        x = torch.stack([data[i:i + a.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block_size] for i in ix])
        return x.to(device), y.to(device)

    def loss_of(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            return F.cross_entropy(run(x).view(-1, c.vocab_size), y.view(-1))

    @torch.no_grad()
    def estimate(split):
        model.eval()
        mean = sum(float(loss_of(*batch(split))) for _ in range(a.eval_iters)) / a.eval_iters
        model.train()
        return mean

    nparams = sum(p.numel() for p in model.parameters())
    print(f"GPT {a.n_layer} layers, {a.n_head} heads, {a.n_embd} wide, context {a.block_size}, vocab {len(chars)}: "
          f"{nparams} parameters on {device}, PyTorch {torch.__version__}", flush=True)
    best, tokens, seconds = math.inf, 0, 0.0
    for it in range(a.max_iters + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(a, it)
        if it % a.eval_interval == 0 or it == a.max_iters:
            train, val = estimate("train"), estimate("val")
            best = min(best, val)
            print(f"step {it}: train loss {train:.4f}, val loss {val:.4f}", flush=True)
        if it == a.max_iters:
            break
        t0 = time.perf_counter()
        loss = loss_of(*batch("train"))
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it % 10 == 0:
            print(f"iter {it}: loss {float(loss):.4f}, lr {lr_at(a, it):.2e}", flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - t0
        tokens += a.batch * a.block_size
    print(f"result work=gpt_char_l{a.n_layer}_h{a.n_head}_e{a.n_embd}_t{a.block_size}_b{a.batch}_i{a.max_iters} "
          f"impl=pytorch seed={a.seed} val_loss={best:.4f} tokens_per_s={tokens / seconds if seconds else 0:.0f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
