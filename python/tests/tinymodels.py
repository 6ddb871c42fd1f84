"""tinymodels.py — two small decoder-only language models written for the tests (no
transformers needed): a LLaMA-like one (RMSNorm, rotary-free attention with grouped KV
heads, SwiGLU MLP, decoder blocks in model.model.layers) and a GPT-2-like one (LayerNorm,
GeLU MLP, blocks in transformer.h). Used by python/tests/test_capture.py."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(v + 1e-6))


def attention(q, k, v):
    s = q.shape[-2]
    w = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    w = w.masked_fill(~mask, float("-inf")).softmax(-1)
    return w @ v


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv, f):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.input_layernorm = RMSNorm(h)
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, kv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, kv * self.hd, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        rep = self.heads // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = attention(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o_proj(a)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class LlamaInner(nn.Module):
    def __init__(self, L, h, heads, kv, f, V):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, h)
        self.layers = nn.ModuleList(LlamaBlock(h, heads, kv, f) for _ in range(L))
        self.norm = RMSNorm(h)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for blk in self.layers:
            x = blk(x)
        return self.norm(x)


class TinyLlama(nn.Module):
    def __init__(self, L=2, h=64, heads=4, kv=2, f=160, V=256):
        super().__init__()
        self.model = LlamaInner(L, h, heads, kv, f, V)
        self.lm_head = nn.Linear(h, V, bias=False)

    def forward(self, ids, labels):
        logits = self.lm_head(self.model(ids))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1))


class GPTBlock(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        x = x + self.c_proj(attention(q, k, v).transpose(1, 2).reshape(b, s, h))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPTInner(nn.Module):
    def __init__(self, L, h, heads, V, S):
        super().__init__()
        self.wte = nn.Embedding(V, h)
        self.wpe = nn.Embedding(S, h)
        self.h = nn.ModuleList(GPTBlock(h, heads) for _ in range(L))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x)


class TinyGPT(nn.Module):
    def __init__(self, L=2, h=64, heads=4, V=256, S=64):
        super().__init__()
        self.transformer = GPTInner(L, h, heads, V, S)
        self.lm_head = nn.Linear(h, V, bias=False)

    def forward(self, ids, labels):
        logits = self.lm_head(self.transformer(ids))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
