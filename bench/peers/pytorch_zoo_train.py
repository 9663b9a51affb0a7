#!/usr/bin/env python3
"""pytorch_zoo_train.py: a zoo model trained to completion in PyTorch 1.13 on the recipe halfgrad's zoo uses, for
docs/zoo.md's "PyTorch, same recipe" column.

    bench/peers/pytorch_zoo_train.py --model NAME [--zoo build/bin/zoo] [--threads 2] [ZOO FLAGS...]

The recipe comes from `zoo --model NAME [ZOO FLAGS] --print-config` (epochs, batch, lr, weight decay, warmup,
augmentation, width, validation, data directory), so both sides train the same thing:
  - Fashion-MNIST from the same IDX files, normalised (pixel / 255 - 0.2860) / 0.3530, the last `validation`
    training images held out;
  - the model of bench/peers/zoo_models.py, initialised as halfgrad's (PyTorch's defaults; the ResNet's
    convolutions kaiming_normal_ fan_out, the ViT's positions trunc_normal_ std 0.02);
  - AdamW (PyTorch's defaults but lr and weight decay), a linear warmup from 0 then a cosine decay to lr / 20
    (halfgrad's WarmupCosine), batches drawn without replacement each epoch (drop_last);
  - augmentation as data/image_augment.h: a random crop from the image padded with black by `augment-pad`
    pixels and a horizontal flip with probability 1/2, drawn per example and epoch.
The data order and the random draws are PyTorch's own (not halfgrad's): the two runs agree within noise.
makemore: the same word list and filter, a split of the same sizes (PyTorch's own shuffle), the same contexts.
vae: pixels / 255 in [0, 1], Adam, the negative ELBO of one draw of z per image (nats per image).
diffusion: pixels / 127.5 - 1 in [-1, 1], DDPM's noise-prediction loss at one random step per image.
gcn: the graph, its split and labels from `zoo --save-batches` (halfgrad draws the graph), Adam; also the same
network on the features alone (self loops only: a 2-layer MLP), to show what the edges add.
Prints one JSON line per epoch (validation accuracy or loss) and a final one (test accuracy or loss, seconds).
Tooling only.
"""
import argparse
import gzip
import json
import math
import os
import struct
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_zoo_train.py: cannot import torch; install Debian's python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_models import (GCN, MODELS, VAE, DiffusionUNet, char_mlp, ddpm_alpha_bar, diffusion_loss,  # noqa: E402
                        gcn_edge_weights, load_safetensors, vae_loss)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEAN, STD = 0.2860, 0.3530


def read_idx(directory, name):
    path = os.path.join(directory, name + ".gz")
    data = gzip.open(path).read() if os.path.exists(path) else open(os.path.join(directory, name), "rb").read()
    rank = data[3]
    shape = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return torch.frombuffer(bytearray(data[4 + 4 * rank:]), dtype=torch.uint8).reshape(shape)


def normalised(images):
    return ((images.float() / 255.0 - MEAN) / STD).unsqueeze(1)


def augment(images, pad, flip, fill):
    """A random crop (padding `pad` with `fill`) and a random horizontal flip of every image [N, 1, H, W]."""
    n, _, h, w = images.shape
    out = images
    if pad > 0:
        padded = F.pad(images, (pad, pad, pad, pad), value=fill)
        dy, dx = torch.randint(0, 2 * pad + 1, (n,)), torch.randint(0, 2 * pad + 1, (n,))
        out = torch.empty_like(images)
        for a in range(2 * pad + 1):
            for b in range(2 * pad + 1):
                chosen = (dy == a) & (dx == b)
                out[chosen] = padded[chosen, :, a:a + h, b:b + w]
    if flip:
        flipped = torch.rand(n) < 0.5
        out[flipped] = out[flipped].flip(-1)
    return out


def char_examples(words, block=3):
    """(contexts [N, block], targets [N]) of every character and end of `words` (data/words.h's rule)."""
    contexts, targets = [], []
    for word in words:
        context = [0] * block
        for c in word + ".":
            target = 0 if c == "." else ord(c) - ord("a") + 1
            contexts.append(list(context))
            targets.append(target)
            context = context[1:] + [target]
    return torch.tensor(contexts), torch.tensor(targets)


def word_splits(path, validation):
    """The words of only a..z (at most 32 letters), shuffled by PyTorch's generator, then validation / test / train."""
    words = [w for w in open(path).read().split("\n") if 0 < len(w) <= 32 and all("a" <= c <= "z" for c in w)]
    order = torch.randperm(len(words)).tolist()
    words = [words[i] for i in order]
    return words[2 * validation:], words[:validation], words[validation:2 * validation]


def mean_loss(model, contexts, targets):
    model.eval()
    with torch.no_grad():
        loss = F.cross_entropy(model(contexts), targets).item()
    model.train()
    return loss


def lr_at(step, base, warmup, total):
    if step < warmup:
        return base * step / warmup
    progress = min(step - warmup, total - warmup) / (total - warmup)
    low = base / 20
    return low + (base - low) * 0.5 * (1 + math.cos(math.pi * progress))


def accuracy(model, images, labels):
    model.eval()
    with torch.no_grad():
        right = sum((model(images[i:i + 500]).argmax(1) == labels[i:i + 500]).sum().item()
                    for i in range(0, len(images), 500))
    model.train()
    return right / len(images)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--zoo", default=os.path.join(ROOT, "build", "bin", "zoo"))
    parser.add_argument("--threads", type=int, default=2)
    args, zoo_flags = parser.parse_known_args()
    config = json.loads(subprocess.run([args.zoo, "--model", args.model] + zoo_flags + ["--print-config"],
                                       check=True, capture_output=True, text=True).stdout)
    torch.set_num_threads(args.threads)
    torch.manual_seed(config["seed"])
    if args.model == "makemore":
        return train_makemore(config)
    if args.model == "vae":
        return train_vae(config)
    if args.model == "diffusion":
        return train_diffusion(config)
    if args.model == "gcn":
        return train_gcn(config, args.zoo, zoo_flags)
    train_images, train_labels = read_idx(config["data"], "train-images-idx3-ubyte"), read_idx(
        config["data"], "train-labels-idx1-ubyte").long()
    test_images, test_labels = normalised(read_idx(config["data"], "t10k-images-idx3-ubyte")), read_idx(
        config["data"], "t10k-labels-idx1-ubyte").long()
    kept = len(train_images) - config["validation"]
    val_images, val_labels = normalised(train_images[kept:]), train_labels[kept:]
    train_images, train_labels = normalised(train_images[:kept]), train_labels[:kept]

    model = MODELS[args.model](1, 28, 28, 10, config["width"])
    for name, p in model.named_parameters():
        if args.model == "resnet" and p.dim() == 4:
            torch.nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")
        if name == "pos_embedding":
            torch.nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
    assert config["optimizer"] == "adamw"
    pad, flip = config["augment-pad"], config["augment-flip"] == "on"
    fit(model, config, train_labels,
        lambda: augment(train_images, pad, flip, -MEAN / STD) if pad or flip else train_images,
        lambda: {"val_accuracy": accuracy(model, val_images, val_labels)},
        lambda: {"test_accuracy": accuracy(model, test_images, test_labels)})


def train_makemore(config):
    """makemore's recipe (samples/zoo/makemore.h) on the same word list: validation and test loss in nats per character."""
    train_words, val_words, test_words = word_splits(config["data"], config["validation"])
    (x, y), (vx, vy), (tx, ty) = char_examples(train_words), char_examples(val_words), char_examples(test_words)
    model = char_mlp(config["width"])
    fit(model, config, y, lambda: x, lambda: {"val_loss": mean_loss(model, vx, vy)},
        lambda: {"test_loss": mean_loss(model, tx, ty)})


def train_vae(config):
    """The VAE's recipe (samples/zoo/generative_models.h): validation and test negative ELBO in nats per image."""
    pixels = read_idx(config["data"], "train-images-idx3-ubyte").float().unsqueeze(1) / 255.0
    test_pixels = read_idx(config["data"], "t10k-images-idx3-ubyte").float().unsqueeze(1) / 255.0
    kept = len(pixels) - config["validation"]
    model = VAE(1, 28, 28, config["width"])

    def negative_elbo(images):
        with torch.no_grad():
            return sum(vae_loss(*model(x, torch.randn(len(x), 20)), x).item() * len(x)
                       for x in images.split(500)) / len(images)

    fit(model, config, torch.zeros(kept), lambda: pixels[:kept],
        lambda: {"val_negative_elbo": negative_elbo(pixels[kept:])},
        lambda: {"test_negative_elbo": negative_elbo(test_pixels)},
        loss_of=lambda x: vae_loss(*model(x, torch.randn(len(x), 20)), x))


def train_diffusion(config):
    """The DDPM's recipe (samples/zoo/diffusion_model.h): validation and test noise-prediction loss."""
    pixels = read_idx(config["data"], "train-images-idx3-ubyte").float().unsqueeze(1) / 127.5 - 1.0
    test_pixels = read_idx(config["data"], "t10k-images-idx3-ubyte").float().unsqueeze(1) / 127.5 - 1.0
    kept = len(pixels) - config["validation"]
    model, alpha_bar = DiffusionUNet(1, config["width"]), ddpm_alpha_bar()

    def loss_of(x):
        return diffusion_loss(model, alpha_bar, x, torch.randn_like(x), torch.randint(0, len(alpha_bar), (len(x),)))

    def held_out(images):
        with torch.no_grad():
            return sum(loss_of(x).item() * len(x) for x in images.split(500)) / len(images)

    fit(model, config, torch.zeros(kept), lambda: pixels[:kept], lambda: {"val_loss": held_out(pixels[kept:])},
        lambda: {"test_loss": held_out(test_pixels)}, loss_of=loss_of)


def train_gcn(config, zoo, zoo_flags):
    """The gcn recipe on halfgrad's graph (zoo --save-batches writes it), then on the features alone."""
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "graph.safetensors")
        subprocess.run([zoo, "--model", "gcn"] + zoo_flags + ["--steps", "1", "--save-batches", path], check=True,
                       capture_output=True)
        graph = load_safetensors(path)
    x, labels = graph["features"], graph["labels"]
    train, validation, test = graph["train_nodes"], graph["validation_nodes"], graph["test_nodes"]
    for name, (src, dst) in (("gcn", (graph["edge_src"], graph["edge_dst"])),
                             ("gcn_features_only", (torch.arange(len(x)), torch.arange(len(x))))):
        weight = gcn_edge_weights(src, dst, len(x))
        model = GCN(x.shape[1], int(labels.max()) + 1, config["width"])
        config = dict(config, model=name)

        def node_accuracy(nodes, model=model, src=src, dst=dst, weight=weight):
            with torch.no_grad():
                return (model(x, src, dst, weight).argmax(1)[nodes] == labels[nodes]).float().mean().item()

        fit(model, config, labels[train], lambda: train,
            lambda: {"val_accuracy": node_accuracy(validation)}, lambda: {"test_accuracy": node_accuracy(test)},
            loss_of=lambda nodes, model=model, src=src, dst=dst, weight=weight: F.cross_entropy(
                model(x, src, dst, weight)[nodes], labels[nodes]))


def fit(model, config, targets, epoch_inputs, validate, test, loss_of=None):
    """The recipe's loop: AdamW (or Adam), warmup-cosine, shuffled batches of `batch` without replacement
    (drop_last); epoch_inputs() gives each epoch's inputs (augmented afresh); a batch's loss is
    loss_of(inputs) when given, the cross-entropy of model(inputs) at the targets otherwise; a JSON line per
    epoch and a last one."""
    kind = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[config["optimizer"]]
    optimizer = kind(model.parameters(), lr=config["lr"], weight_decay=config["weight-decay"])
    batch, per_epoch = config["batch"], len(targets) // config["batch"]
    total = config["steps"] or config["epochs"] * per_epoch
    warmup = min(config["warmup"], total - 1)
    step, start = 0, time.perf_counter()
    while step < total:
        inputs, order = epoch_inputs(), torch.randperm(len(targets))
        for b in range(per_epoch):
            if step == total:
                break
            rows = order[b * batch:(b + 1) * batch]
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config["lr"], warmup, total)
            loss = loss_of(inputs[rows]) if loss_of else F.cross_entropy(model(inputs[rows]), targets[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
        print(json.dumps({"model": config["model"], "impl": "pytorch", "step": step, "loss": loss.item(), **validate(),
                          "seconds": time.perf_counter() - start}), flush=True)
    print(json.dumps({"model": config["model"], "impl": "pytorch", "steps": total, "threads": torch.get_num_threads(),
                      **test(), "train_seconds": time.perf_counter() - start, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
