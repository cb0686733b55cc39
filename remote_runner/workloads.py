"""The built-in workloads: models at two sizes and synthetic datasets, deterministic from the seed.

Every dataset is a real ``torch.utils.data.Dataset`` of ``cfg.dataset_size``
samples, so DistributedSampler, epochs and DataLoader workers behave as they
do with real data.  Each target is a function of its input (a fixed random
"teacher", a class template, an arithmetic sequence), so the loss really falls.
"small" models are small enough that a 2-process CPU run of 30 steps takes seconds; "large" ones keep one GPU
busy (``make gpu-check`` on an H200 ran the small transformer at 11-15 % GPU utilisation with bf16 slower than
fp32: kernel launches, not arithmetic, set its pace, so a precision or compile comparison measured nothing).
``cfg.model_size`` "auto" (the default) is large on a CUDA or XPU device and small elsewhere.
"""
import copy
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import Dataset, TensorDataset

LINEAR_IN, LINEAR_OUT = 64, 10
MLP_IN, MLP_HIDDEN, MLP_LAYERS, MLP_CLASSES = 128, 256, 3, 10
GPT_VOCAB, GPT_SEQ, GPT_D, GPT_LAYERS, GPT_HEADS = 256, 64, 128, 2, 4
CNN_CLASSES, CNN_SIZE, CNN_WIDTHS = 10, 32, (16, 32, 64)
#: Each workload's dimensions per size.  Large: the transformer is GPT-2 small's body (d 768, 12 heads, 6 layers,
#: 256 tokens; about 43 M parameters, about 4 GB at batch 32 in fp32 with AdamW: an 8 GB GPU holds it).
SIZES = {
    "small": {"linear": {"in_dim": LINEAR_IN, "out_dim": LINEAR_OUT},
              "mlp": {"in_dim": MLP_IN, "hidden": MLP_HIDDEN, "layers": MLP_LAYERS},
              "transformer": {"seq_len": GPT_SEQ, "d_model": GPT_D, "layers": GPT_LAYERS, "heads": GPT_HEADS},
              "cnn": {"widths": CNN_WIDTHS}},
    "large": {"linear": {"in_dim": 1024, "out_dim": 256},
              "mlp": {"in_dim": 1024, "hidden": 4096, "layers": 4},
              "transformer": {"seq_len": 256, "d_model": 768, "layers": 6, "heads": 12},
              "cnn": {"widths": (64, 128, 256)}},
}

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Workload:
    """A model on its device, its dataset and loss, and what throughput figures it supports."""

    model: nn.Module
    dataset: Dataset
    loss_fn: LossFn
    #: Tokens in one sample (the transformer's sequence length); None for non-token models.
    tokens_per_sample: Optional[int]
    #: Forward + backward FLOPs of one training sample, for TFLOP/s and MFU; None when unknown.
    flops_per_sample: Optional[float]
    #: The size it was built at ("small" or "large": SIZES).
    size: str = "small"

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def resolve_model_size(requested: str, device_type: str) -> str:
    """The size a run builds: what it asked for, or for "auto" large on a GPU (CUDA, XPU), small elsewhere (a CPU,
    Apple's MPS: a laptop's)."""
    if requested != "auto":
        return requested
    return "large" if device_type in ("cuda", "xpu") else "small"


def build_workload(cfg, device: torch.device) -> Workload:
    """The workload ``cfg.workload`` at ``cfg.model_size`` (resolved for ``device``) with its model on ``device``;
    seed the global RNG first (the model init draws from it, so every rank builds the same model)."""
    builders = {"linear": _linear, "mlp": _mlp, "transformer": _transformer, "cnn": _cnn}
    size = resolve_model_size(cfg.model_size, device.type)
    work = builders[cfg.workload](cfg, **SIZES[size][cfg.workload])
    work.model.to(device)
    work.size = size
    return work


def _linear(cfg, in_dim: int, out_dim: int) -> Workload:
    gen = torch.Generator().manual_seed(cfg.seed)
    weight = torch.randn(in_dim, out_dim, generator=gen)
    x = torch.randn(cfg.dataset_size, in_dim, generator=gen)
    y = x @ weight + 0.1 * torch.randn(cfg.dataset_size, out_dim, generator=gen)
    model = nn.Linear(in_dim, out_dim)
    dataset = TensorDataset(x, y)
    return Workload(model, dataset, F.mse_loss, None, counted_flops(model, dataset, F.mse_loss))


def _mlp(cfg, in_dim: int, hidden: int, layers: int) -> Workload:
    gen = torch.Generator().manual_seed(cfg.seed)
    teacher = torch.randn(in_dim, MLP_CLASSES, generator=gen)
    x = torch.randn(cfg.dataset_size, in_dim, generator=gen)
    dataset = TensorDataset(x, (x @ teacher).argmax(dim=1))
    model = MLP(in_dim, hidden, layers)
    return Workload(model, dataset, F.cross_entropy, None, counted_flops(model, dataset, F.cross_entropy))


def _transformer(cfg, seq_len: int, d_model: int, layers: int, heads: int) -> Workload:
    model = TinyGPT(seq_len=seq_len, d_model=d_model, layers=layers, heads=heads)
    model.grad_checkpointing = cfg.grad_checkpointing
    dataset = ArithmeticSequences(cfg.dataset_size, cfg.seed, seq_len=seq_len)
    return Workload(model, dataset, lm_loss, seq_len, model.flops_per_token() * seq_len)


def _cnn(cfg, widths: tuple) -> Workload:
    model = SmallResNet(widths=widths)
    dataset = NoisyTemplates(cfg.dataset_size, cfg.seed)
    return Workload(model, dataset, F.cross_entropy, None, counted_flops(model, dataset, F.cross_entropy))


def counted_flops(model: nn.Module, dataset: Dataset, loss_fn: LossFn) -> Optional[float]:
    """Forward + backward FLOPs of one sample, counted by torch's FlopCounterMode on a copy
    (so the real model's BatchNorm statistics and gradients are untouched)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    probe = copy.deepcopy(model).cpu()
    x, y = dataset[0]
    with FlopCounterMode(display=False) as counter:
        loss_fn(probe(x.unsqueeze(0)), y.unsqueeze(0)).backward()
    return float(counter.get_total_flops()) or None


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position of every sequence."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _sample_generator(seed: int, index: int) -> torch.Generator:
    """A generator for sample ``index`` alone: any worker can make any sample, in any order."""
    return torch.Generator().manual_seed((seed * 1000003 + index) % (2 ** 63))


class ArithmeticSequences(Dataset):
    """Token sequences ``start + k * stride (mod vocab)``: a pattern a causal LM learns in a few
    hundred steps.  Generated per index, so a large dataset costs no memory."""

    def __init__(self, size: int, seed: int, vocab: int = GPT_VOCAB, seq_len: int = GPT_SEQ):
        self.size, self.seed, self.vocab, self.seq_len = size, seed, vocab, seq_len

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = _sample_generator(self.seed, index)
        start, stride = torch.randint(0, self.vocab, (2,), generator=gen).tolist()
        tokens = (start + (stride + 1) * torch.arange(self.seq_len + 1)) % self.vocab
        return tokens[:-1], tokens[1:]


class NoisyTemplates(Dataset):
    """32x32 RGB images: one fixed random template per class plus per-sample noise.
    Generated per index (a pre-generated set would hold 12 KiB per sample)."""

    def __init__(self, size: int, seed: int, classes: int = CNN_CLASSES, image_size: int = CNN_SIZE):
        self.size, self.seed, self.classes = size, seed, classes
        gen = torch.Generator().manual_seed(seed)
        self.templates = torch.randn(classes, 3, image_size, image_size, generator=gen)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = _sample_generator(self.seed, index)
        label = int(torch.randint(0, self.classes, (1,), generator=gen))
        image = self.templates[label] + torch.randn(self.templates.shape[1:], generator=gen)
        return image, torch.tensor(label)


class MLP(nn.Module):
    """A plain classifier: ``MLP_LAYERS`` hidden layers with ReLU."""

    def __init__(self, in_dim: int = MLP_IN, hidden: int = MLP_HIDDEN, layers: int = MLP_LAYERS,
                 classes: int = MLP_CLASSES):
        super().__init__()
        dims = [in_dim] + [hidden] * layers
        body = []
        for a, b in zip(dims[:-1], dims[1:]):
            body += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*body, nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = (t.view(batch, seq, self.heads, d_model // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d_model, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, d_model))


class Block(nn.Module):
    """A pre-norm GPT block: attention and a 4x MLP, each with a residual connection."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT-style causal language model (about 0.47 M parameters small, 43 M large: SIZES)."""

    def __init__(self, vocab: int = GPT_VOCAB, seq_len: int = GPT_SEQ, d_model: int = GPT_D,
                 layers: int = GPT_LAYERS, heads: int = GPT_HEADS):
        super().__init__()
        self.seq_len, self.d_model, self.layers = seq_len, d_model, layers
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        #: Recompute each block's activations in backward instead of storing them.
        self.grad_checkpointing = False

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                # use_reentrant=False: the recommended variant; works with DDP and torch.compile
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln_f(x))

    def flops_per_token(self) -> float:
        """Training FLOPs per token, the PaLM/nanoGPT estimate 6N + 12·L·d·T: N counts every
        weight used in a matmul (not the embedding lookups), the second term is attention."""
        embeddings = self.tok_emb.weight.numel() + self.pos_emb.weight.numel()
        n = sum(p.numel() for p in self.parameters()) - embeddings
        return 6.0 * n + 12.0 * self.layers * self.d_model * self.seq_len


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a (projected when the shape changes) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """A ResNet-style classifier for 32x32 images: a stem and three residual stages."""

    def __init__(self, classes: int = CNN_CLASSES, widths: tuple[int, int, int] = CNN_WIDTHS):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        self.blocks = nn.Sequential(
            ResidualBlock(widths[0], widths[0], 1),
            ResidualBlock(widths[0], widths[1], 2),
            ResidualBlock(widths[1], widths[2], 2),
        )
        self.fc = nn.Linear(widths[2], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

