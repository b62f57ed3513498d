#!/usr/bin/env python3
"""PyTorch side of bench/bench_gpt.c: issue #34's GPT training step, timed the same way, printing the
same `result work=gpt_... impl=pytorch[_compile] median_ms=... tokens_per_s=... peak_mib=...` line.

The step: forward (bench/gpt.py, attention by F.scaled_dot_product_attention) under
torch.autocast(bfloat16) (--amp bf16, the default; none: float32, TF32 as --tf32 says), cross-entropy
over the (B T, V) logits, backward, clip_grad_norm_(1.0), AdamW (fused on the GPU; lr 6e-4, betas
(0.9, 0.95), weight decay 0.1 on the 2-D parameters), zero_grad(set_to_none=True); dropout 0; one
fixed batch of random tokens. --warmup steps, then the median of --steps steps, each synchronised.
Memory: torch.cuda.max_memory_reserved(), reset before the model is made. --compile: torch.compile
(model). One batch size a process; a batch that does not fit prints "# batch B: out of memory". The
loss must be finite and lower after the timed steps than after the first step (exit 1 otherwise)."""
import argparse
import math
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)
import torch.nn.functional as F

from gpt import GPT, Config, adamw
from timing import median_seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--vocab-size", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--amp", choices=["bf16", "none"], default="bf16")
    ap.add_argument("--tf32", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(1337)
    c = Config(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab_size,
               sdpa=hasattr(F, "scaled_dot_product_attention"))  # PyTorch 2.0 and later
    model = GPT(c).to(device)
    opt = adamw(model, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, **({"fused": True} if cuda else {}))
    run = torch.compile(model) if a.compile else model
    x = torch.randint(0, c.vocab_size, (a.batch, c.block_size), device=device)
    y = torch.randint(0, c.vocab_size, (a.batch, c.block_size), device=device)
    losses = []

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            loss = F.cross_entropy(run(x).view(-1, c.vocab_size), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    try:
        step()
    except torch.cuda.OutOfMemoryError if cuda else RuntimeError as e:
        print(f"# batch {a.batch}: out of memory ({str(e).splitlines()[0]})", flush=True)
        return 0
    seconds = median_seconds(step, device, a.steps, warmup=a.warmup)
    first, last = float(losses[0]), float(losses[-1])
    print(f"# {device}, torch {torch.__version__}, attention by {'SDPA' if c.sdpa else 'matmul + softmax'}: "
          f"loss {first:.4f} after the first step, {last:.4f} after the timed ones", flush=True)
    if not (math.isfinite(last) and last < first):
        print("check failed: the loss is finite and fell", file=sys.stderr)
        return 1
    mode = "bf16" if a.amp == "bf16" else "tf32" if a.tf32 else "fp32"
    key = f"gpt_l{c.n_layer}_h{c.n_head}_e{c.n_embd}_t{c.block_size}_v{c.vocab_size}_b{a.batch}_{mode}"
    peak = torch.cuda.max_memory_reserved(device) / 2**20 if cuda else 0.0
    print(f"result work={key} impl=pytorch{'_compile' if a.compile else ''} median_ms={1e3 * seconds:.4f} "
          f"runs={a.steps} tokens_per_s={a.batch * c.block_size / seconds:.0f} peak_mib={peak:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
