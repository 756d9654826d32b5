"""A torch module traced with hooks agrees with the zoo's analytical description of the same model."""

import pytest

torch = pytest.importorskip("torch", reason="needs the [torch] extra: pip install 'easlurm[torch]'")
nn = torch.nn

from easlurm.measure.torch_trace import trace_module  # noqa: E402
from easlurm.model.zoo import get_workload  # noqa: E402


class EncoderLayer(nn.Module):
    """Post-LN BERT encoder layer."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.ln1(x + a)
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class Bert(nn.Module):
    """BERT-base for sequence classification, written from the paper's sizes."""

    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ffn=3072, labels=2):
        super().__init__()
        self.word, self.pos, self.tok_type = nn.Embedding(vocab, d), nn.Embedding(512, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ffn) for _ in range(layers))
        self.pool, self.tanh, self.cls = nn.Linear(d, d), nn.Tanh(), nn.Linear(d, labels)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
        x = self.ln(self.word(ids) + self.pos(pos) + self.tok_type(torch.zeros_like(ids)))
        for layer in self.layers:
            x = layer(x)
        return self.cls(self.tanh(self.pool(x[:, 0])))


class Bottleneck(nn.Module):
    def __init__(self, c_in, width, stride):
        super().__init__()
        out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.down = None
        if stride != 1 or c_in != out:
            self.down = nn.Sequential(nn.Conv2d(c_in, out, 1, stride, bias=False), nn.BatchNorm2d(out))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50 v1.5 (stride in the 3x3 convolution), as torchvision builds it."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, c_in = [], 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(c_in, width, stride if i == 0 else 1))
                c_in = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def _agree(traced, zoo):
    assert traced.n_params == zoo.n_params
    assert traced.flops_gemm_f == pytest.approx(zoo.flops_gemm_f, rel=1e-9)
    assert traced.flops_conv_f == pytest.approx(zoo.flops_conv_f, rel=1e-9)
    assert traced.flops_total == pytest.approx(zoo.flops_total, rel=0.02)  # residual adds are functional
    assert traced.gemm_k == pytest.approx(zoo.gemm_k, rel=1e-6)
    assert traced.conv_c == pytest.approx(zoo.conv_c, rel=1e-6)
    assert traced.weight_bytes == pytest.approx(zoo.weight_bytes, rel=0.01)


def test_traced_bert_base_agrees_with_zoo():
    with torch.device("meta"):  # shapes only: no 440 MB of random weights
        net = Bert()
        traced = trace_module(net, torch.zeros(2, 32, dtype=torch.long), precision="bf16")
    assert traced.n_params == sum(p.numel() for p in net.parameters())
    _agree(traced, get_workload("bert-base", seq_len=32, precision="bf16"))


def test_traced_resnet50_agrees_with_zoo():
    with torch.device("meta"):
        traced = trace_module(ResNet50(), torch.zeros(1, 3, 64, 64), precision="fp32")
    _agree(traced, get_workload("resnet50", image_size=64, precision="fp32"))


def test_unhandled_module_is_counted_as_parameters(caplog):
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(10))

        def forward(self, x):
            return x * self.w

    net = nn.Sequential(nn.Linear(10, 10), Scale())
    w = trace_module(net, torch.zeros(1, 10))
    assert w.n_params == 110 + 10
    assert "no handler for Scale" in caplog.text
