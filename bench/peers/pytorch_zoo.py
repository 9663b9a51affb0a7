#!/usr/bin/env python3
"""pytorch_zoo.py: PyTorch 1.13 on the CPU, timed on the workloads of halfgrad's `bench_zoo` (bench/bench_zoo.cpp
states them): one training step of each zoo model (bench/peers/zoo_models.py, the same architectures,
default widths) at batch 128 on 28 x 28 images (makemore: contexts of 3 characters) -- forward, cross-entropy,
backward, AdamW (lr 1e-3, weight decay 0.01); the VAE's negative ELBO with Adam (lr 1e-3); the DCGAN's
discriminator step then generator step with Adam (lr 2e-4, betas (0.5, 0.999)); the DDPM U-Net's noise
prediction loss at random steps with AdamW (lr 1e-3, no weight decay); seq2seq on random ids
(bench_zoo states the shapes) with AdamW -- gradients set to None.

    bench/peers/pytorch_zoo.py [--quick] [--only NAME] [--threads N] [--batch N]

Prints one JSON line per model with bench_zoo's fields (impl "pytorch"). Run it with a tuned BLAS as
bench/peers/README.md says (scripts/bench-zoo-peers does). Tooling only: halfgrad's build and tests never run it.
"""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_zoo.py: cannot import torch; install Debian's python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import mapped_blas  # noqa: E402
from zoo_models import (DCGAN, MODELS, VAE, DiffusionUNet, Seq2SeqTransformer, char_mlp, ddpm_alpha_bar,  # noqa: E402
                        diffusion_loss, vae_loss)


def make_step(name, batch):
    """bench_zoo's step of model `name` (bench/bench_zoo.cpp states them)."""
    if name == "vae":
        model = VAE(1, 28, 28)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        images = torch.rand(batch, 1, 28, 28)

        def vae_step():
            vae_loss(*model(images, torch.randn(batch, 20)), images).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return vae_step
    if name == "diffusion":
        model = DiffusionUNet(1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        images, alpha_bar = torch.rand(batch, 1, 28, 28) * 2 - 1, ddpm_alpha_bar()

        def diffusion_step():
            t = torch.randint(0, 1000, (batch,))
            diffusion_loss(model, alpha_bar, images, torch.randn_like(images), t).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return diffusion_step
    if name == "seq2seq":
        model = Seq2SeqTransformer()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        source, decoder_input = torch.randint(1, 11, (batch, 6)), torch.randint(1, 33, (batch, 10))
        target = torch.randint(1, 33, (batch * 10,))

        def seq2seq_step():
            logits = model(source, decoder_input)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), target).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return seq2seq_step
    if name == "dcgan":
        gan = DCGAN(1, 28, 28)
        d_opt = torch.optim.Adam(gan.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        g_opt = torch.optim.Adam(gan.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        real = torch.rand(batch, 1, 28, 28) * 2 - 1
        bce = torch.nn.functional.binary_cross_entropy_with_logits

        def gan_step():
            fake = gan.generator(torch.randn(batch, 64))
            real_logits, fake_logits = gan.discriminator(real), gan.discriminator(fake.detach())
            d_loss = bce(real_logits, torch.ones_like(real_logits)) + bce(fake_logits, torch.zeros_like(fake_logits))
            d_loss.backward()
            d_opt.step()
            d_opt.zero_grad(set_to_none=True)
            logits = gan.discriminator(fake)
            bce(logits, torch.ones_like(logits)).backward()
            g_opt.step()
            g_opt.zero_grad(set_to_none=True)
            d_opt.zero_grad(set_to_none=True)
        return gan_step
    chars = name == "makemore"
    model = char_mlp() if chars else MODELS[name](1, 28, 28, 10)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    images = torch.randint(0, 27, (batch, 3)) if chars else torch.randn(batch, 1, 28, 28)
    labels = torch.randint(0, 27 if chars else 10, (batch,))

    def step():
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed steps instead of 20")
    parser.add_argument("--only", default="",
                        help="only this model (mlp, lenet, resnet, vit, makemore, vae, dcgan, diffusion, seq2seq)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for name in list(MODELS) + ["makemore", "vae", "dcgan", "diffusion", "seq2seq"]:
        if args.only and name != args.only:
            continue
        step = make_step(name, args.batch)
        step()
        step()
        times = []
        for _ in range(3 if args.quick else 20):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(json.dumps({"bench": "zoo", "model": name, "impl": "pytorch", "dtype": "f32", "threads": args.threads,
                          "batch": args.batch, "best_ms": min(times) * 1e3,
                          "median_ms": sorted(times)[len(times) // 2] * 1e3, "torch": torch.__version__,
                          "blas": mapped_blas()}), flush=True)


if __name__ == "__main__":
    main()
