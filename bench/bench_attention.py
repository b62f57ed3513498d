#!/usr/bin/env python3
"""PyTorch side of bench/bench_attention.c: issue #34's attention or LayerNorm alone, forward + backward,
timed the same way, printing the same `result work=... impl=pytorch median_ms=... runs=...` line.

--op attention: F.scaled_dot_product_attention(q, k, v, is_causal=True) of bfloat16 (B, H, T, d) leaves,
with the backend --backend names (default: whichever PyTorch picks, reported as path=); --op layernorm:
F.layer_norm of a bfloat16 (rows, width) leaf with float32 weight and bias under torch.autocast(bfloat16)
(so in float32, as a GPT's). A fixed output gradient; --warmup passes, then the median of --steps."""
import argparse
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from timing import median_seconds

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def leaf(shape, dtype, device):
    return (torch.rand(shape, device=device) * 2 - 1).to(dtype).requires_grad_()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=["attention", "layernorm"], default="attention")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in (("batch", 16), ("heads", 12), ("seq", 1024), ("head-dim", 64), ("rows", 16384),
                          ("width", 768), ("steps", 20), ("warmup", 10)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--backend", choices=sorted(BACKENDS), help="attention: force this SDPA backend")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(1)
    extra = ""
    if a.op == "attention":
        shape = (a.batch, a.heads, a.seq, a.head_dim)
        q, k, v = (leaf(shape, torch.bfloat16, device) for _ in range(3))
        grad = torch.randn(shape, device=device).to(torch.bfloat16)
        backends = [BACKENDS[a.backend]] if a.backend else list(BACKENDS.values())

        def step():
            with sdpa_kernel(backends):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(grad)
            q.grad = k.grad = v.grad = None

        work = f"attention_b{a.batch}_h{a.heads}_t{a.seq}_d{a.head_dim}_bf16"
        extra = f" path={a.backend or 'default'}"
    else:
        x = leaf((a.rows, a.width), torch.bfloat16, device)
        w, b = leaf((a.width,), torch.float32, device), leaf((a.width,), torch.float32, device)
        grad = torch.randn((a.rows, a.width), device=device)

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                out = F.layer_norm(x, (a.width,), w, b, 1e-5)
            out.backward(grad.to(out.dtype))
            x.grad = w.grad = b.grad = None

        work = f"layernorm_n{a.rows}_c{a.width}_bf16"
    seconds = median_seconds(step, device, a.steps, warmup=a.warmup)
    print(f"# {device}, torch {torch.__version__}")
    print(f"result work={work} impl=pytorch median_ms={1e3 * seconds:.4f} runs={a.steps}{extra}", flush=True)


if __name__ == "__main__":
    main()
