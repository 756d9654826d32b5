"""Built-in model zoo: analytical per-sample workloads of common training models at any batch/sequence/image size."""

from __future__ import annotations

import functools
from collections.abc import Callable

from easlurm.energy.spec import ModelNames
from easlurm.errors import ModelError
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.workload import Optimizer, Precision, Workload

MODEL_NAMES: tuple[str, ...] = (
    "resnet18",
    "resnet18-cifar",
    "resnet50",
    "vgg16",
    "vit-b16",
    "vit-l16",
    "bert-base",
    "bert-large",
    "distilbert",
    "albert-base",
    "gpt2",
    "tinyllama-1.1b",
    "llama3-8b",
    "shufflenet-small",
    "shufflenet-v2-cifar",
)

_ALIASES = {
    "resnet-50": "resnet50",
    "resnet-18": "resnet18",
    "resnet-18-cifar": "resnet18-cifar",
    "resnet18-cifar10": "resnet18-cifar",
    "vgg-16": "vgg16",
    "vit-b-16": "vit-b16",
    "vit-b/16": "vit-b16",
    "vit": "vit-b16",
    "vit-l-16": "vit-l16",
    "vit-l/16": "vit-l16",
    "albert": "albert-base",
    "albert-base-v2": "albert-base",
    "distilbert-base": "distilbert",
    "gpt-2": "gpt2",
    "tinyllama": "tinyllama-1.1b",
    "llama-3-8b": "llama3-8b",
    "llama3": "llama3-8b",
    "shufflenet": "shufflenet-small",
    "shufflenetv2-cifar": "shufflenet-v2-cifar",
    "shufflenet-cifar": "shufflenet-v2-cifar",
}


def canonical_name(name: str) -> str:
    """Normalise a user-typed model name ('ViT_B/16' -> 'vit-b16'); unknown -> ModelError listing the zoo."""
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in MODEL_NAMES:
        raise ModelError(f"unknown model {name!r} (known: {', '.join(MODEL_NAMES)})")
    return key


def spec_model_names() -> ModelNames:
    """The names a SPEC's `model=` may carry: the zoo's, then the aliases canonical_name reads (the file
    `easlurm model list --names` writes for the SPANK plugin's `models=` check at submission)."""
    return ModelNames.from_names(MODEL_NAMES, _ALIASES)


def _out(h: int, k: int, s: int, p: int) -> int:
    return (h + 2 * p - k) // s + 1


def _conv_bn(
    b: WorkloadBuilder,
    c_in: int,
    c_out: int,
    k: int,
    h: int,
    s: int = 1,
    groups: int = 1,
    act: str | None = "relu",
) -> int:
    """Conv (padding k//2) + BatchNorm (+ activation); returns the output height (square maps)."""
    ho = _out(h, k, s, k // 2)
    b.conv2d(c_in, c_out, k, ho, ho, stride=s, groups=groups)
    b.norm(c_out * ho * ho, c_out, "batchnorm")
    if act:
        b.activation(c_out * ho * ho, act)
    return ho


def _pooled_stem(b: WorkloadBuilder, image: int, c_out: int, k: int) -> int:
    """The ImageNet stem: a k x k stride-2 convolution and a 3x3 stride-2 max-pool; returns the map height."""
    h = _conv_bn(b, 3, c_out, k, image, 2)
    hp = _out(h, 3, 2, 1)
    b.pool(c_out * h * h, c_out * hp * hp)
    return hp


def _resnet50(b: WorkloadBuilder, image: int, classes: int = 1000) -> None:
    h, c_in = _pooled_stem(b, image, 64, 7), 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            h1 = _conv_bn(b, c_in, width, 1, h)
            h2 = _conv_bn(b, width, width, 3, h1, s)
            _conv_bn(b, width, 4 * width, 1, h2, act=None)
            if i == 0:
                _conv_bn(b, c_in, 4 * width, 1, h, s, act=None)
            b.elementwise(4 * width * h2 * h2)
            b.activation(4 * width * h2 * h2, "relu")
            h, c_in = h2, 4 * width
    b.pool(c_in * h * h, c_in)
    b.linear(1, c_in, classes)
    b.loss(1, classes)


def _vgg16(b: WorkloadBuilder, image: int, classes: int = 1000) -> None:
    h, c_in = image, 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            ho = h // 2
            b.pool(c_in * h * h, c_in * ho * ho)
            h = ho
        else:
            assert isinstance(v, int)
            b.conv2d(c_in, v, 3, h, h, bias=True)
            b.activation(v * h * h, "relu")
            c_in = v
    b.pool(c_in * max(h, 1) ** 2, 512 * 49)  # adaptive average pool to 7x7
    for d_in, d_out in ((512 * 49, 4096), (4096, 4096)):
        b.linear(1, d_in, d_out)
        b.activation(d_out, "relu")
        b.dropout(d_out)
    b.linear(1, 4096, classes)
    b.loss(1, classes)


def _encoder_layer(
    b: WorkloadBuilder,
    seq: int,
    d: int,
    heads: int,
    ffn: int,
    repeat: int,
    shared: bool = False,
    causal_flash: bool = False,
    act: str = "gelu",
    dropout: bool = True,
    views: int = 10,
    mha_copies: bool = False,
) -> None:
    """Transformer encoder block with LayerNorm, GELU MLP and torch SDPA attention.

    `dropout` adds Hugging Face's training-mode dropouts after the attention output and the MLP (torchvision's
    ViT has p=0, which launches nothing); `views` counts the host-only reshapes of one block's attention.
    `mha_copies` is torch's `nn.MultiheadAttention` (torchvision's ViT, batch_first): its functional form
    copies the transposed input before the packed projection, makes the split q, k, v contiguous and copies
    the heads back (`permute(...).contiguous()`), forward and backward (`F.multi_head_attention_forward`).
    """
    if mha_copies:
        b.elementwise(seq * d, operands=1, repeat=repeat)
    b.linear(seq, d, 3 * d, repeat=repeat, shared=shared)
    b.python_ops(views, repeat)
    if mha_copies:
        b.elementwise(seq * 3 * d, operands=1, repeat=repeat)
    b.attention(seq, heads, d // heads, flash=True, repeat=repeat, causal=causal_flash, dropout=dropout)
    if mha_copies:
        b.elementwise(seq * d, operands=1, repeat=repeat)
    b.linear(seq, d, d, repeat=repeat, shared=shared)
    if dropout:
        b.dropout(seq * d, repeat=repeat)
    b.elementwise(seq * d, repeat=repeat)
    _norm(b, seq * d, d, repeat, shared)
    b.linear(seq, d, ffn, repeat=repeat, shared=shared)
    b.activation(seq * ffn, act, repeat=repeat)
    b.linear(seq, ffn, d, repeat=repeat, shared=shared)
    if dropout:
        b.dropout(seq * d, repeat=repeat)
    b.elementwise(seq * d, repeat=repeat)
    _norm(b, seq * d, d, repeat, shared)


def _norm(b: WorkloadBuilder, elems: int, d: int, repeat: int, shared: bool) -> None:
    """A LayerNorm used `repeat` times; shared parameters (ALBERT) are counted once."""
    before = b.n_params
    b.norm(elems, d, repeat=repeat)
    if shared:
        b._n_params = before + 2 * d  # count shared parameters once


def _vit(
    b: WorkloadBuilder, image: int, d: int, layers: int, heads: int, ffn: int, classes: int = 1000
) -> None:
    grid = image // 16
    if grid < 1:
        raise ModelError(f"image size {image} is smaller than the 16-pixel patch")
    b.conv2d(3, d, 16, grid, grid, stride=16, bias=True)
    seq = grid * grid + 1
    b._n_params += seq * d + d  # class token and position embeddings
    b.elementwise(seq * d)
    _encoder_layer(b, seq, d, heads, ffn, layers, dropout=False, views=8, mha_copies=True)
    b.norm(seq * d, d)
    b.linear(1, d, classes)
    b.loss(1, classes)


def _bert(
    b: WorkloadBuilder,
    seq: int,
    d: int,
    layers: int,
    heads: int,
    ffn: int,
    vocab: int = 30522,
    emb: int | None = None,
    token_types: bool = True,
    pooler: bool = True,
    shared: bool = False,
    labels: int = 2,
    act: str = "gelu",
) -> None:
    e = emb or d
    b.embedding(seq, vocab, e)
    b.embedding(seq, 512, e)
    if token_types:
        b.embedding(seq, 2, e)
    b.elementwise(seq * e, operands=3)
    b.norm(seq * e, e)
    b.dropout(seq * e)
    b.python_ops(6)  # position/token-type ids, extended attention mask
    if e != d:
        b.linear(seq, e, d)
    _encoder_layer(b, seq, d, heads, ffn, layers, shared=shared, act=act)
    b.linear(1, d, d)  # pooler (BERT, ALBERT) or pre-classifier (DistilBERT)
    b.activation(d, "tanh" if pooler else "relu")
    b.linear(1, d, labels)
    b.loss(1, labels)


def _gpt2(
    b: WorkloadBuilder, seq: int, d: int = 768, layers: int = 12, heads: int = 12, vocab: int = 50257
) -> None:
    """Hugging Face GPT2LMHeadModel: gelu_new, dropouts, causal SDPA, FP32 loss over the tied LM head."""
    b.embedding(seq, vocab, d)
    b.embedding(seq, 1024, d)
    b.elementwise(seq * d)
    b.dropout(seq * d)
    b.norm(seq * d, d, repeat=layers)
    _encoder_layer_pre_ln_tail(b, seq, d, heads, 4 * d, layers)
    b.norm(seq * d, d)
    b.linear(seq, d, vocab, bias=False, tied=True)
    b.loss(seq, vocab, fp32_logits=True)


def _encoder_layer_pre_ln_tail(
    b: WorkloadBuilder, seq: int, d: int, heads: int, ffn: int, layers: int
) -> None:
    """GPT-2 block after its first LayerNorm: causal attention, residual, LayerNorm, GELU MLP, residual."""
    b.linear(seq, d, 3 * d, repeat=layers)
    b.python_ops(10, layers)  # split, view and transpose of q, k, v; merge heads
    b.attention(seq, heads, d // heads, flash=True, repeat=layers, causal=True, dropout=True)
    b.linear(seq, d, d, repeat=layers)
    b.dropout(seq * d, repeat=layers)
    b.elementwise(seq * d, repeat=layers)
    b.norm(seq * d, d, repeat=layers)
    b.linear(seq, d, ffn, repeat=layers)
    b.activation(seq * ffn, "gelu_tanh", repeat=layers)
    b.linear(seq, ffn, d, repeat=layers)
    b.dropout(seq * d, repeat=layers)
    b.elementwise(seq * d, repeat=layers)


def _llama(
    b: WorkloadBuilder, seq: int, d: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int
) -> None:
    """Hugging Face LlamaForCausalLM: eager RMSNorm and rotary embedding, grouped KV heads expanded for SDPA,
    SiLU-gated MLP, FP32 loss over the LM head."""
    hd = d // heads
    kv = kv_heads * hd
    b.embedding(seq, vocab, d)
    r = layers
    b.rmsnorm_eager(seq * d, d, repeat=r)
    b.linear(seq, d, d, bias=False, repeat=r)
    b.linear(seq, d, 2 * kv, bias=False, repeat=r)
    b.python_ops(8, r)  # view/transpose of q, k, v and of the output
    for _ in range(6):  # rotary: q*cos, rotate_half(q) (slice, neg, cat), *sin, add; same for k
        b.elementwise(seq * (d + kv) / 2.0, operands=2, repeat=r)
    if kv_heads != heads:
        b.elementwise(seq * 2 * d, operands=1, repeat=r)  # repeat_kv copies k and v to every head
    b.attention(seq, heads, hd, flash=True, repeat=r, causal=True)
    b.linear(seq, d, d, bias=False, repeat=r)
    b.elementwise(seq * d, repeat=r)
    b.rmsnorm_eager(seq * d, d, repeat=r)
    b.linear(seq, d, 2 * ffn, bias=False, repeat=r)  # gate and up projections
    b.activation(seq * ffn, "silu", repeat=r)
    b.elementwise(seq * ffn, repeat=r)
    b.linear(seq, ffn, d, bias=False, repeat=r)
    b.elementwise(seq * d, repeat=r)
    b.rmsnorm_eager(seq * d, d)
    b.linear(seq, d, vocab, bias=False)
    b.loss(seq, vocab, fp32_logits=True)


#: ShuffleNet-V2 stage widths (torchvision's 0.5x and 1.0x)
SHUFFLENET_WIDTHS = {"0.5x": (48, 96, 192), "1.0x": (116, 232, 464)}
#: images at most this wide get the CIFAR stem (3x3 stride-1 convolution, no max-pool), as CIFAR training
#: code does: an ImageNet stem would shrink a 32x32 image to 8x8 before the first stage
SMALL_IMAGE = 64


def _stem(b: WorkloadBuilder, image: int, c_out: int, k: int) -> int:
    """The CIFAR stem (a 3x3 stride-1 convolution) for images of at most SMALL_IMAGE, else the pooled one."""
    return _conv_bn(b, 3, c_out, 3, image, 1) if image <= SMALL_IMAGE else _pooled_stem(b, image, c_out, k)


def _shufflenet(b: WorkloadBuilder, image: int, widths: tuple[int, int, int], classes: int) -> None:
    """ShuffleNet-V2: depthwise-separable blocks with channel split and shuffle, stages of 4/8/4 units."""
    h, c_in = _stem(b, image, 24, 3), 24
    for c_out, repeats in zip(widths, (4, 8, 4)):
        half = c_out // 2
        # down-sampling block: two branches, each ending at c_out/2 channels
        h2 = _conv_bn(b, c_in, c_in, 3, h, 2, groups=c_in, act=None)
        _conv_bn(b, c_in, half, 1, h2)
        h1 = _conv_bn(b, c_in, half, 1, h)
        _conv_bn(b, half, half, 3, h1, 2, groups=half, act=None)
        _conv_bn(b, half, half, 1, h2)
        b.elementwise(c_out * h2 * h2, operands=1)  # concat + channel shuffle
        b.python_ops(4)
        h, c_in = h2, c_out
        for _ in range(repeats - 1):
            _conv_bn(b, half, half, 1, h)
            _conv_bn(b, half, half, 3, h, groups=half, act=None)
            _conv_bn(b, half, half, 1, h)
            b.elementwise(c_out * h * h, operands=1)
            b.python_ops(5)  # chunk, view, transpose, contiguous, view
    _conv_bn(b, c_in, 1024, 1, h)
    b.pool(1024 * h * h, 1024)
    b.linear(1, 1024, classes)
    b.loss(1, classes)


def _resnet_basic(b: WorkloadBuilder, image: int, blocks: tuple[int, ...], classes: int) -> None:
    """ResNet-18/34: stages of basic blocks (two 3x3 convolutions), a 1x1 projection where the shape
    changes; small images get the CIFAR stem."""
    h, c_in = _stem(b, image, 64, 7), 64
    for width, repeats, stride in zip((64, 128, 256, 512), blocks, (1, 2, 2, 2)):
        for i in range(repeats):
            s = stride if i == 0 else 1
            h1 = _conv_bn(b, c_in, width, 3, h, s)
            _conv_bn(b, width, width, 3, h1, act=None)
            if s != 1 or c_in != width:
                _conv_bn(b, c_in, width, 1, h, s, act=None)
            b.elementwise(width * h1 * h1)
            b.activation(width * h1 * h1, "relu")
            h, c_in = h1, width
    b.pool(c_in * h * h, c_in)
    b.linear(1, c_in, classes)
    b.loss(1, classes)


#: name -> (family, kind "vision"/"text", default size, builder(builder, size))
_MODELS: dict[str, tuple[str, str, int, Callable[[WorkloadBuilder, int], None]]] = {
    "resnet18": ("cnn", "vision", 224, lambda b, s: _resnet_basic(b, s, (2, 2, 2, 2), 1000)),
    # CIFAR-10 ResNet-18 (3x3 stride-1 stem, no max-pool), as CIFAR training code and the Pollux traces use it
    "resnet18-cifar": ("cnn", "vision", 32, lambda b, s: _resnet_basic(b, s, (2, 2, 2, 2), 10)),
    "resnet50": ("cnn", "vision", 224, _resnet50),
    "vgg16": ("cnn", "vision", 224, _vgg16),
    "shufflenet-small": (
        "cnn",
        "vision",
        224,
        lambda b, s: _shufflenet(b, s, SHUFFLENET_WIDTHS["0.5x"], 1000),
    ),
    # CIFAR-100 ShuffleNet-V2 1.0x (the network of the Zeus power-limit sweeps)
    "shufflenet-v2-cifar": (
        "cnn",
        "vision",
        32,
        lambda b, s: _shufflenet(b, s, SHUFFLENET_WIDTHS["1.0x"], 100),
    ),
    "vit-b16": ("vit", "vision", 224, lambda b, s: _vit(b, s, 768, 12, 12, 3072)),
    "vit-l16": ("vit", "vision", 224, lambda b, s: _vit(b, s, 1024, 24, 16, 4096)),
    "bert-base": ("bert", "text", 128, lambda b, s: _bert(b, s, 768, 12, 12, 3072)),
    "bert-large": ("bert", "text", 128, lambda b, s: _bert(b, s, 1024, 24, 16, 4096)),
    "distilbert": (
        "bert",
        "text",
        256,
        lambda b, s: _bert(b, s, 768, 6, 12, 3072, token_types=False, pooler=False),
    ),
    "albert-base": (
        "albert",
        "text",
        256,
        lambda b, s: _bert(b, s, 768, 12, 12, 3072, vocab=30000, emb=128, shared=True, act="gelu_tanh"),
    ),
    "gpt2": ("decoder", "text", 1024, lambda b, s: _gpt2(b, s)),
    "tinyllama-1.1b": ("decoder", "text", 512, lambda b, s: _llama(b, s, 2048, 22, 32, 4, 5632, 32000)),
    "llama3-8b": ("decoder", "text", 2048, lambda b, s: _llama(b, s, 4096, 32, 32, 8, 14336, 128256)),
}


#: how a workload's attention runs: `sdpa` (torch's fused scaled-dot-product kernels, what torchvision,
#: Hugging Face and torchtitan run today) or `eager` (matmul, softmax, dropout and matmul, the scores written
#: to HBM: NVIDIA DeepLearningExamples' BERT, Hugging Face's `attn_implementation="eager"`)
ATTENTION = ("sdpa", "eager")


def model_family(name: str) -> str:
    """Family used for targeted calibration scalars ('cnn', 'vit', 'bert', 'albert', 'decoder')."""
    return _MODELS[canonical_name(name)][0]


def default_size(name: str) -> tuple[str, int]:
    """('seq_len' | 'image_size', default value) of a zoo model."""
    _, kind, size, _ = _MODELS[canonical_name(name)]
    return ("image_size" if kind == "vision" else "seq_len", size)


def get_workload(
    name: str,
    *,
    precision: str | Precision = "bf16",
    seq_len: int | None = None,
    image_size: int | None = None,
    optimizer: str | Optimizer = "adamw",
    attention: str = "sdpa",
) -> Workload:
    """The per-sample workload of a zoo model; seq_len applies to text models, image_size to vision ones;
    `attention` is how its attention runs (ATTENTION)."""
    key = canonical_name(name)
    if attention not in ATTENTION:
        raise ModelError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    prec = Precision.parse(precision)
    opt = Optimizer.parse(optimizer)
    _, kind, default, _ = _MODELS[key]
    if kind == "vision":
        if seq_len is not None:
            raise ModelError(f"{key} is a vision model: give image_size, not seq_len")
        size = default if image_size is None else int(image_size)
    else:
        if image_size is not None:
            raise ModelError(f"{key} is a text model: give seq_len, not image_size")
        size = default if seq_len is None else int(seq_len)
    if size <= 0:
        raise ModelError(f"{key}: size must be > 0, got {size}")
    return _build(key, prec, opt, size, attention == "sdpa")


@functools.lru_cache(maxsize=512)
def _build(key: str, precision: Precision, optimizer: Optimizer, size: int, fused: bool = True) -> Workload:
    family, kind, _, fn = _MODELS[key]
    b = WorkloadBuilder(precision, fused_attention=fused)
    fn(b, size)
    if kind == "vision":
        return b.build(key, family, optimizer, image_size=size)
    return b.build(key, family, optimizer, seq_len=size)
