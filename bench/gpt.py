"""GPT-2 in PyTorch with nanoGPT's architecture and parameter names (written here, not nanoGPT's code):
pre-LayerNorm blocks, GELU, an output head tied to the token embedding, GPT-2's initialisation (N(0, 0.02),
residual projections N(0, 0.02 / sqrt(2 n_layer)), zero biases), nanoGPT's dropout (after the embeddings,
on the attention weights, after each residual projection; none at all for dropout 0). Shared by
tests/make_gpt_fixtures.py (the fixtures of tests/test_gpt.c, cgrad's models/gpt.c held to it),
bench/bench_gpt.py (the training step of issue #34) and bench/train_gpt.py (nanoGPT's loop). Attention is
F.scaled_dot_product_attention (causal) with sdpa, else composed of matmul, mask and softmax, which
PyTorch 1.13 also runs."""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Config:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    vocab_size: int = 50304
    bias: bool = True
    sdpa: bool = False
    dropout: float = 0.0


def layer_norm(c):
    """nn.LayerNorm of the embedding width, without its bias when c.bias is off (PyTorch 2.1 and later)."""
    return torch.nn.LayerNorm(c.n_embd) if c.bias else torch.nn.LayerNorm(c.n_embd, bias=False)


def dropped(c, x, training):
    """x after nanoGPT's dropout of c.dropout (x itself for 0, or outside training)."""
    return F.dropout(x, c.dropout) if training and c.dropout > 0 else x


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.c_attn = torch.nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = torch.nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        b, t, e = x.shape
        h, p = self.c.n_head, self.c.dropout if self.training else 0.0
        q, k, v = (z.view(b, t, h, e // h).transpose(1, 2) for z in self.c_attn(x).split(e, dim=2))
        if self.c.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(e // h)
            att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            att = att.softmax(-1)
            y = (F.dropout(att, p) if p > 0 else att) @ v
        return dropped(self.c, self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e)), self.training)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.ln_1, self.attn, self.ln_2 = layer_norm(c), Attention(c), layer_norm(c)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.mlp.c_proj = torch.nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + dropped(self.c, self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)))), self.training)


class GPT(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(c.vocab_size, c.n_embd), wpe=torch.nn.Embedding(c.block_size, c.n_embd),
            h=torch.nn.ModuleList(Block(c) for _ in range(c.n_layer)),
            ln_f=layer_norm(c)))
        self.lm_head = torch.nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))
            elif p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx):
        t = self.transformer
        x = dropped(self.c, t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device)), self.training)
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


def adamw(model, lr, betas, weight_decay, **kw):
    """nanoGPT's configure_optimizers: weight decay on the 2-D parameters (matrices, embeddings) only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, **kw)
