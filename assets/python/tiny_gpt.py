"""A tiny character-level GPT for CPU runs (scripts/advised_run.py).

2 layers, d_model 64, 4 heads, context 64, pre-norm blocks, learned positions, tied
embeddings. Deterministic: the model's initial weights come from ``seed``; each rank draws
its training windows from its own half of the training split with a generator seeded by
(seed, rank, step, micro-batch), so two runs that take the same steps see the same data.
The last 10 % of the text is held out for the eval loss.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "data", "tiny-text.txt")

LAYERS, D_MODEL, HEADS, CONTEXT = 2, 64, 4, 64


class Block(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d=D_MODEL, layers=LAYERS, heads=HEADS, context=CONTEXT):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, context) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln(x) @ self.tok.weight.T
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class CharData:
    """The text as character ids; train split by rank, a fixed held-out eval set."""

    def __init__(self, path=TEXT, context=CONTEXT, seed=0):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.chars = sorted(set(text))
        self.vocab = len(self.chars)
        ids = torch.tensor([self.chars.index(c) for c in text], dtype=torch.long)
        cut = int(0.9 * len(ids))
        self.train, self.held = ids[:cut], ids[cut:]
        self.context, self.seed = context, seed

    def _windows(self, ids, starts):
        x = torch.stack([ids[s:s + self.context] for s in starts])
        y = torch.stack([ids[s + 1:s + 1 + self.context] for s in starts])
        return x, y

    def batch(self, rank, world, step, micro, n):
        """n training windows of this rank's share of the training split."""
        share = len(self.train) // world
        lo = rank * share
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + rank) * 1_000_003
                                           + step) * 1009 + micro)
        starts = lo + torch.randint(0, share - self.context - 1, (n,), generator=g)
        return self._windows(self.train, starts.tolist())

    def eval_set(self, n=128):
        """n held-out windows, evenly spaced: the same for every run."""
        last = len(self.held) - self.context - 1
        starts = [int(i * last / max(n - 1, 1)) for i in range(n)]
        return self._windows(self.held, starts)


@torch.no_grad()
def eval_loss(model, xy, chunk=64):
    model.eval()
    x, y = xy
    total = 0.0
    for i in range(0, len(x), chunk):
        total += float(model(x[i:i + chunk], y[i:i + chunk])) * len(x[i:i + chunk])
    model.train()
    return total / len(x)


def make_model(vocab, seed=0):
    torch.manual_seed(seed)
    return TinyGPT(vocab)


def n_params(model):
    return sum(p.numel() for p in model.parameters())

