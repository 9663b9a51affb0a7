"""The zoo's image models in PyTorch (samples/zoo/image_models.h), with halfgrad's submodule names, so a
state dict halfgrad writes (zoo --save-init) loads key for key. Tooling only: used by
scripts/make-torch-zoo-vectors and bench/peers/pytorch_zoo.py; halfgrad never imports it."""
import json
import math
import struct

import torch
from torch import nn
from torch.nn import functional as F


def mlp(c, h, w, classes, width=0):
    width = width or 256
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes))


def lenet(c, h, w, classes, width=0):
    width = width or 16
    return nn.Sequential(nn.Conv2d(c, width, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(width, 2 * width, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(2 * width * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, classes))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, c, h, w, classes, width=0, blocks=1):
        super().__init__()
        width = width or 16

        def stage(cin, cout, stride):
            return nn.Sequential(*[BasicBlock(cin if b == 0 else cout, cout, stride if b == 0 else 1)
                                   for b in range(blocks)])

        self.conv1 = nn.Conv2d(c, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = stage(width, width, 1)
        self.layer2 = stage(width, 2 * width, 2)
        self.layer3 = stage(2 * width, 4 * width, 2)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(2, 3)))


class VisionTransformer(nn.Module):
    def __init__(self, c, h, w, classes, width=0, patch=4, depth=4, heads=4):
        super().__init__()
        width = width or 64
        self.patch_embed = nn.Conv2d(c, width, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embedding = nn.Parameter(torch.zeros(1, 1 + (h // patch) * (w // patch), width))
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(width), enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.class_token.expand(x.shape[0], 1, -1), patches], 1) + self.pos_embedding
        return self.head(self.encoder(tokens)[:, 0])


def char_mlp(width=0, block=3, embedding=10, vocab=27):
    """makemore's character MLP (samples/zoo/makemore.h)."""
    width = width or 200
    return nn.Sequential(nn.Embedding(vocab, embedding), nn.Flatten(), nn.Linear(block * embedding, width, bias=False),
                         nn.BatchNorm1d(width), nn.Tanh(), nn.Linear(width, vocab))


class VAE(nn.Module):
    """The zoo's VAE (samples/zoo/generative_models.h); forward takes the noise eps."""

    def __init__(self, c, h, w, width=0, latent=20):
        super().__init__()
        width = width or 400
        self.shape = (c, h, w)
        self.fc1 = nn.Linear(c * h * w, width)
        self.fc_mu = nn.Linear(width, latent)
        self.fc_logvar = nn.Linear(width, latent)
        self.fc3 = nn.Linear(latent, width)
        self.fc4 = nn.Linear(width, c * h * w)

    def forward(self, x, eps):
        h = torch.relu(self.fc1(x.flatten(1)))
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + eps * torch.exp(0.5 * logvar)
        return self.fc4(torch.relu(self.fc3(z))).reshape(-1, *self.shape), mu, logvar


def vae_loss(logits, mu, logvar, x):
    """The negative ELBO in nats per image: Bernoulli cross-entropy summed over pixels plus the KL term."""
    reconstruction = nn.functional.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu * mu - torch.exp(logvar))
    return (reconstruction + kl) / x.shape[0]


class DCGAN(nn.Module):
    """The zoo's DCGAN (samples/zoo/generative_models.h): .generator and .discriminator."""

    def __init__(self, c, h, w, width=0, latent=64):
        super().__init__()
        width = width or 32
        h4, w4 = h // 4, w // 4
        self.generator = nn.Sequential(
            nn.Linear(latent, 2 * width * h4 * w4, bias=False), nn.BatchNorm1d(2 * width * h4 * w4), nn.ReLU(),
            nn.Unflatten(1, (2 * width, h4, w4)), nn.ConvTranspose2d(2 * width, width, 4, 2, 1, bias=False),
            nn.BatchNorm2d(width), nn.ReLU(), nn.ConvTranspose2d(width, c, 4, 2, 1), nn.Tanh())
        self.discriminator = nn.Sequential(
            nn.Conv2d(c, width, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(width, 2 * width, 4, 2, 1, bias=False),
            nn.BatchNorm2d(2 * width), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(2 * width * h4 * w4, 1))


def timestep_embedding(t, dim):
    """The sinusoidal embedding of diffusion steps t [B]: [sin(t f), cos(t f)], f_i = 10000^(-i / (dim / 2))."""
    half = dim // 2
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half).float()
    angles = t.float()[:, None] * frequencies[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], 1)


def group_norm(channels):
    return nn.GroupNorm(math.gcd(8, channels), channels)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, time_dim):
        super().__init__()
        self.norm1 = group_norm(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_proj = nn.Linear(time_dim, cout)
        self.norm2 = group_norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x))) + self.time_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.skip is not None else x)


class DiffusionUNet(nn.Module):
    """The zoo's DDPM U-Net (samples/zoo/diffusion_model.h); forward takes x_t and the steps t."""

    def __init__(self, c, width=0):
        super().__init__()
        w = self.width = width or 16
        self.time_mlp = nn.Sequential(nn.Linear(w, 4 * w), nn.SiLU(), nn.Linear(4 * w, 4 * w))
        self.conv_in = nn.Conv2d(c, w, 3, padding=1)
        self.down1 = ResBlock(w, w, 4 * w)
        self.downsample1 = nn.Conv2d(w, w, 3, 2, 1)
        self.down2 = ResBlock(w, 2 * w, 4 * w)
        self.downsample2 = nn.Conv2d(2 * w, 2 * w, 3, 2, 1)
        self.mid = ResBlock(2 * w, 2 * w, 4 * w)
        self.upsample2 = nn.Sequential(nn.Upsample(scale_factor=2.0), nn.Conv2d(2 * w, 2 * w, 3, padding=1))
        self.up2 = ResBlock(4 * w, 2 * w, 4 * w)
        self.upsample1 = nn.Sequential(nn.Upsample(scale_factor=2.0), nn.Conv2d(2 * w, w, 3, padding=1))
        self.up1 = ResBlock(2 * w, w, 4 * w)
        self.norm_out = group_norm(w)
        self.conv_out = nn.Conv2d(w, c, 3, padding=1)

    def forward(self, x, t):
        temb = self.time_mlp(timestep_embedding(t, self.width))
        h1 = self.down1(self.conv_in(x), temb)
        h2 = self.down2(self.downsample1(h1), temb)
        h = self.mid(self.downsample2(h2), temb)
        h = self.up2(torch.cat([self.upsample2(h), h2], 1), temb)
        h = self.up1(torch.cat([self.upsample1(h), h1], 1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))


def ddpm_alpha_bar(steps=1000, beta_first=1e-4, beta_last=0.02):
    """abar_t = prod_{s <= t} (1 - beta_s), betas linear (Ho et al.), in float64 as halfgrad computes them."""
    out, product = [], 1.0
    for i in range(steps):
        product *= 1.0 - (beta_first + (beta_last - beta_first) * i / (steps - 1))
        out.append(product)
    return torch.tensor(out, dtype=torch.float64)


def diffusion_loss(model, alpha_bar, x0, noise, t):
    """DDPM's simplified loss: the MSE between the noise and its prediction from x_t."""
    signal = alpha_bar[t].sqrt().float()[:, None, None, None]
    spread = (1.0 - alpha_bar[t]).sqrt().float()[:, None, None, None]
    return F.mse_loss(model(x0 * signal + noise * spread, t), noise)


class Seq2SeqTransformer(nn.Module):
    """The zoo's seq2seq model (samples/zoo/seq2seq_model.h): numbers (6 digit ids) to words (10 word ids)."""

    def __init__(self, width=0, source_vocabulary=11, target_vocabulary=33, source_length=6, target_length=10,
                 layers=2):
        super().__init__()
        width = width or 64
        self.src_embed = nn.Embedding(source_vocabulary, width)
        self.tgt_embed = nn.Embedding(target_vocabulary, width)
        self.src_pos = nn.Parameter(torch.zeros(1, source_length, width))
        self.tgt_pos = nn.Parameter(torch.zeros(1, target_length, width))
        self.transformer = nn.Transformer(width, 4, layers, layers, 4 * width, dropout=0.0, batch_first=True)
        self.generator = nn.Linear(width, target_vocabulary)

    def forward(self, source, decoder_input):
        source_padding, target_padding = source == 0, decoder_input == 0
        t = decoder_input.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        out = self.transformer(self.src_embed(source) + self.src_pos[:, :source.shape[1]],
                               self.tgt_embed(decoder_input) + self.tgt_pos[:, :t], tgt_mask=causal,
                               src_key_padding_mask=source_padding, tgt_key_padding_mask=target_padding,
                               memory_key_padding_mask=source_padding)
        return self.generator(out)


class GCNConv(nn.Module):
    """PyTorch Geometric's GCNConv in plain torch: x' = D^-1/2 (A + I) D^-1/2 x W^T + b by index_add."""

    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, src, dst, weight):
        h = self.lin(x)
        return torch.zeros_like(h).index_add_(0, dst, h[src] * weight) + self.bias


class GCN(nn.Module):
    """The zoo's gcn (samples/zoo/gcn_model.h)."""

    def __init__(self, features, classes, width=0):
        super().__init__()
        width = width or 32
        self.conv1 = GCNConv(features, width)
        self.conv2 = GCNConv(width, classes)

    def forward(self, x, src, dst, weight):
        return self.conv2(torch.relu(self.conv1(x, src, dst, weight)), src, dst, weight)


def gcn_edge_weights(src, dst, nodes):
    """1 / sqrt(deg(s) deg(d)) of every edge of A + I (src, dst include the self loops)."""
    degree = torch.zeros(nodes, dtype=torch.float64).index_add_(0, dst, torch.ones(len(dst), dtype=torch.float64))
    return (1.0 / torch.sqrt(degree[src] * degree[dst])).float().unsqueeze(1)


class LstmLanguageModel(nn.Module):
    """The zoo's char-lstm (samples/zoo/lstm_lm.h): embed, lstm (2 layers, batch first), head."""

    def __init__(self, vocab, width=0, layers=2):
        super().__init__()
        width = width or 256
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=layers, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


MODELS = {"mlp": mlp, "lenet": lenet, "resnet": ResNet, "vit": VisionTransformer}

DTYPES = {"F32": torch.float32, "I64": torch.int64, "F64": torch.float64, "I32": torch.int32}


def load_safetensors(path):
    """{name: tensor} of a safetensors file (the dtypes halfgrad writes for these models)."""
    with open(path, "rb") as f:
        blob = f.read()
    size = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + size])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        data = bytearray(blob[8 + size + begin:8 + size + end])
        out[name] = torch.frombuffer(data, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"]).clone() \
            if end > begin else torch.zeros(entry["shape"], dtype=DTYPES[entry["dtype"]])
    return out
