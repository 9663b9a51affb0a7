#!/usr/bin/env python3
"""pytorch_train.py: bench_train's workloads in PyTorch, for a side-by-side with halfgrad (issue 20).

One JSON object per line, with the keys of bench/bench_train.cpp ("bench": "train_step") plus
"impl": "pytorch", the torch version, the threads and the environment it ran under; and the fp32 /
bf16 GEMM of bench_ops ("bench": "gemm", shape "square").

Workloads, built to match halfgrad's models exactly (layers/gpt.cpp, layers/transformer.cpp,
layers/basic.cpp):
  (a) GPT L4 H4 C256 T256 B8   (b) GPT L4 H4 C256 T64 B4   (c) MLP 784-1024-1024-10, batch 256
  GPT: vocab 256, learned positions (context = T), pre-LN blocks x + attn(ln_1(x)), h + mlp(ln_2(h)),
       c_attn / c_proj / c_fc with biases, MLP ratio 4, GELU tanh form, LayerNorm eps 1e-5, dropout 0,
       ln_f, head tied to wte (logits = x wte^T), mean cross-entropy over B*T. GPT-2 init: N(0, 0.02),
       zero biases, residual projections N(0, 0.02 / sqrt(2 L)).
  MLP: Linear-ReLU-Linear-ReLU-Linear with biases, cross-entropy on random inputs and labels.
  Step: forward + backward + AdamW (GPT: lr 3e-4, weight decay 0.1 on every parameter, clip the
  gradient norm to 1.0; MLP: lr 1e-3, weight decay 1e-2, no clipping -- as bench_train), betas
  (0.9, 0.999), eps 1e-8, zero_grad(set_to_none=True). AdamW is torch's default implementation
  (on the CPU in 1.13: the per-tensor loop; no fused kernel).
  FLOPs per step: GPT 6 N B T + 12 L C T B T, MLP 6 N B (N: parameters, tied weight counted once).
Attention: PyTorch 1.13 has no F.scaled_dot_product_attention, so it is written the standard way:
  q k^T / sqrt(D), causal mask (masked_fill -inf), softmax, @ v (nanoGPT's slow path).
Precisions: fp32; bf16 = torch.autocast("cpu", dtype=torch.bfloat16) around the forward and loss,
  fp32 parameters (the master weights), fp32 AdamW. (CPU autocast has no loss scaler; fp16 is not run.)
Timing: 2 warm-up steps, then the median wall time of --steps steps (GPT T64 and the MLP: 3x steps),
  as bench_train. GEMM: torch.mm of two random N x N matrices, best of >= 3 calls and ~0.5 s.

Environment (see bench/peers/README.md): Debian's python3-torch uses the system libblas.so.3; without
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp it runs on reference BLAS, ~50x slower.
  The "blas" key records the BLAS library actually mapped into this process.

Usage: pytorch_train.py [--threads N] [--steps N] [--quick] [--precision fp32|bf16|all]
                        [--models gpt256,gpt64,mlp,gemm] [--gemm-size N]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.stderr.write("pytorch_train.py: torch is not installed; see bench/peers/README.md "
                     "(sudo apt-get install python3-torch libopenblas0-openmp libtcmalloc-minimal4)\n")
    sys.exit(2)

ENV_KEYS = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS")


# ---- the models ---------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, context):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("causal", mask.view(1, 1, context, context), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, D).transpose(1, 2)
        k = k.view(B, T, self.n_head, D).transpose(1, 2)
        v = v.view(B, T, self.n_head, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, context, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps)
        self.attn = CausalSelfAttention(n_embd, n_head, context)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class GPT(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, n_embd, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(context, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, context, eps) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)
        residual_std = 0.02 / math.sqrt(2.0 * n_layer)
        for name, p in self.named_parameters():
            if name.startswith("ln_") or ".ln_" in name:
                continue  # ones / zeros
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, residual_std if "c_proj.weight" in name else 0.02)

    def loss(self, ids, targets):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the head tied to wte
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


# ---- timing -------------------------------------------------------------------------------------

def time_steps(warmup, steps, step):
    """(median wall ms, median process CPU ms) per step: bench_train's median_ms and median_cpu_ms."""
    for _ in range(warmup):
        step()
    ms, cpu_ms = [], []
    for _ in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        ms.append((time.perf_counter() - start) * 1e3)
        cpu_ms.append((time.process_time() - cpu_start) * 1e3)
    # bench_train's median: v[n / 2] of the sorted times
    return statistics.median_high(ms), statistics.median_high(cpu_ms)


def autocast(precision):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def param_count(model):
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


class Emitter:
    def __init__(self, threads):
        self.common = {
            "impl": "pytorch",
            "torch": torch.__version__,
            "threads": threads,
            "device": "cpu",
            "blas": mapped_blas(),
            "env": {k: os.environ.get(k, "") for k in ENV_KEYS},
        }

    def emit(self, bench, **fields):
        line = {"bench": bench, **fields, **self.common}
        print(json.dumps(line), flush=True)


def mapped_blas():
    """The BLAS / oneDNN libraries mapped into this process (reference BLAS means ~50x slower)."""
    libs = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if "blas" in base or "lapack" in base or "tcmalloc" in base:
                    libs.add(path)
    except OSError:
        pass
    return sorted(libs)


def bench_gpt(out, name, L, H, C, T, B, steps, precision):
    torch.manual_seed(1)
    model = GPT(256, T, L, H, C)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    ids = torch.randint(0, 256, (B, T))
    targets = torch.randint(0, 256, (B, T))

    def step():
        with autocast(precision):
            loss = model.loss(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step_ms, cpu_ms = time_steps(2, steps, step)
    n = param_count(model)
    flops = 6.0 * n * B * T + 12.0 * L * C * T * B * T
    out.emit("train_step", precision=precision, model=name, params=n, batch=B, context=T, median_ms=step_ms,
             median_cpu_ms=cpu_ms,
             tokens_per_s=B * T / (step_ms / 1e3), flops_per_step=flops, gflops=flops / (step_ms / 1e3) / 1e9,
             steps=steps)


def bench_mlp(out, steps, precision):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
    B = 256
    x = torch.randn(B, 784)
    y = torch.randint(0, 10, (B,))

    def step():
        with autocast(precision):
            logits = model(x)
        F.cross_entropy(logits.float(), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step_ms, cpu_ms = time_steps(2, steps, step)
    n = param_count(model)
    flops = 6.0 * n * B
    out.emit("train_step", precision=precision, model="mlp_784_1024_1024_10", params=n, batch=B, median_ms=step_ms,
             median_cpu_ms=cpu_ms,
             samples_per_s=B / (step_ms / 1e3), flops_per_step=flops, gflops=flops / (step_ms / 1e3) / 1e9,
             steps=steps)


def bench_gemm(out, size, precision):
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    torch.manual_seed(3)
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    c = torch.empty(size, size, dtype=dtype)
    torch.mm(a, b, out=c)  # warm-up
    best, total, run = float("inf"), 0.0, 0
    while run < 20 and (run < 3 or total < 0.5):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        t = time.perf_counter() - start
        best, total, run = min(best, t), total + t, run + 1
    gflops = 2.0 * size ** 3 / best / 1e9
    out.emit("gemm", precision=precision, shape="square", dtype="f32" if precision == "fp32" else "bf16",
             m=size, n=size, k=size, ms=best * 1e3, gflops=gflops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 steps (smoke runs)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "all"), default="all")
    parser.add_argument("--models", default="gpt256,gpt64,mlp,gemm")
    parser.add_argument("--gemm-size", type=int, default=2048)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    steps = 2 if args.quick else max(1, args.steps)
    models = set(args.models.split(","))
    unknown = models - {"gpt256", "gpt64", "mlp", "gemm"}
    if unknown:
        parser.error("unknown --models entries %s; expected gpt256, gpt64, mlp, gemm" % sorted(unknown))
    out = Emitter(torch.get_num_threads())
    if not any("openblas" in lib for lib in out.common["blas"]):
        sys.stderr.write("pytorch_train.py: warning: OpenBLAS is not mapped (%s); fp32 runs on a slow BLAS. "
                         "See bench/peers/README.md for LD_LIBRARY_PATH.\n" % out.common["blas"])
    precisions = ("fp32", "bf16") if args.precision == "all" else (args.precision,)
    for precision in precisions:
        if "gpt256" in models:
            bench_gpt(out, "gpt_L4_H4_C256_T256_B8", 4, 4, 256, 256, 8, steps, precision)
        if "gpt64" in models:
            bench_gpt(out, "gpt_L4_H4_C256_T64_B4", 4, 4, 256, 64, 4, steps * 3, precision)
        if "mlp" in models:
            bench_mlp(out, steps * 3, precision)
        if "gemm" in models:
            bench_gemm(out, args.gemm_size, precision)


if __name__ == "__main__":
    main()
