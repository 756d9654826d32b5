"""Characterise a torch.nn.Module by one dummy forward pass with hooks (thesis 4.3.3); needs the `torch` extra."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from easlurm.errors import ModelError
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.workload import Optimizer, Precision, Workload

log = logging.getLogger(__name__)


def _numel(shape: Any) -> float:
    n = 1.0
    for d in shape:
        n *= int(d)
    return n


def _handlers(nn: Any) -> list[tuple[type, Callable[[WorkloadBuilder, Any, Any, Any, int], None]]]:
    """(module class, handler) pairs; a handler gets (builder, module, input tensor, output tensor, batch)."""

    def linear(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        tokens = _numel(x.shape) / m.in_features / batch
        b.linear(tokens, m.in_features, m.out_features, bias=m.bias is not None)

    def conv(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        if m.kernel_size[0] != m.kernel_size[1] or m.stride[0] != m.stride[1]:
            log.warning("%s: non-square kernel/stride approximated by its first dimension", type(m).__name__)
        b.conv2d(
            m.in_channels,
            m.out_channels,
            m.kernel_size[0],
            int(y.shape[2]),
            int(y.shape[3]),
            stride=m.stride[0],
            groups=m.groups,
            bias=m.bias is not None,
        )

    def norm(kind: str) -> Callable[[WorkloadBuilder, Any, Any, Any, int], None]:
        def handler(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
            channels = getattr(m, "num_features", None)
            if channels is None:
                channels = int(_numel(m.normalized_shape))
            b.norm(_numel(y.shape) / batch, channels, kind)

        return handler

    def act(kind: str) -> Callable[[WorkloadBuilder, Any, Any, Any, int], None]:
        return lambda b, m, x, y, batch: b.activation(_numel(y.shape) / batch, kind)

    def embedding(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        b.embedding(_numel(x.shape) / batch, m.num_embeddings, m.embedding_dim)

    def pool(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        b.pool(_numel(x.shape) / batch, _numel(y.shape) / batch)

    def dropout(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        if float(getattr(m, "p", 0.0)) > 0.0:  # p=0 launches nothing
            b.dropout(_numel(y.shape) / batch)

    def mha(b: WorkloadBuilder, m: Any, x: Any, y: Any, batch: int) -> None:
        seq = int(x.shape[1] if m.batch_first else x.shape[0])
        e = m.embed_dim
        b.linear(seq, e, 3 * e, bias=m.in_proj_bias is not None)
        b.attention(seq, m.num_heads, e // m.num_heads)
        b.linear(seq, e, e, bias=m.out_proj.bias is not None)

    table: list[tuple[type, Callable[[WorkloadBuilder, Any, Any, Any, int], None]]] = [
        (nn.MultiheadAttention, mha),
        (nn.Linear, linear),
        (nn.Conv2d, conv),
        (nn.BatchNorm2d, norm("batchnorm")),
        (nn.LayerNorm, norm("layernorm")),
        (nn.ReLU, act("relu")),
        (nn.GELU, act("gelu")),
        (nn.SiLU, act("silu")),
        (nn.Tanh, act("tanh")),
        (nn.Sigmoid, act("sigmoid")),
        (nn.Embedding, embedding),
        (nn.MaxPool2d, pool),
        (nn.AvgPool2d, pool),
        (nn.AdaptiveAvgPool2d, pool),
        (nn.Dropout, dropout),
    ]
    if hasattr(nn, "RMSNorm"):
        table.insert(0, (nn.RMSNorm, norm("rmsnorm")))
    return table


#: one forward call a hook saw: (module, its handler, its inputs, its output)
_Call = tuple[Any, Callable[..., None], Any, Any]


def trace_module(
    module: Any,
    example_input: Any,
    *,
    name: str | None = None,
    family: str = "custom",
    precision: str | Precision = "bf16",
    optimizer: str | Optimizer = "adamw",
    seq_len: int | None = None,
    image_size: int | None = None,
) -> Workload:
    """Per-sample workload of `module` from one forward pass on `example_input` (batch first, any batch size).

    Only module calls are seen: functional operations in forward() (residual adds, F.relu) are not counted,
    and modules without a handler contribute their parameters only (a warning names them).
    """
    try:
        import torch
        from torch import nn
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ModelError("tracing a torch module needs torch: pip install 'easlurm[torch]'") from exc

    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    batch = int(inputs[0].shape[0])
    handlers = _handlers(nn)
    b = WorkloadBuilder(Precision.parse(precision))
    calls: list[_Call] = []
    hooks: list[Any] = []
    _hook_modules(module, handlers, b, calls, hooks)
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    for mod, fn, inp, out in calls:
        x = inp[0] if isinstance(inp, tuple) and inp else inp
        y = out[0] if isinstance(out, tuple) else out
        fn(b, mod, x, y, batch)
    b._n_params -= _repeated_params(calls)
    return b.build(
        name or type(module).__name__.lower(),
        family=family,
        optimizer=optimizer,
        seq_len=seq_len,
        image_size=image_size,
    )


def _hook_modules(
    m: Any,
    handlers: list[tuple[type, Callable[..., None]]],
    b: WorkloadBuilder,
    calls: list[_Call],
    hooks: list[Any],
) -> None:
    """Hook every module with a handler, so that its forward calls land in `calls`; a handled module covers
    its children (MultiheadAttention's out_proj). An unhandled leaf adds its parameters to `b` without FLOPs."""
    fn = next((fn for cls, fn in handlers if isinstance(m, cls)), None)
    if fn is not None:
        hooks.append(m.register_forward_hook(lambda mod, inp, out, fn=fn: calls.append((mod, fn, inp, out))))
        return
    children = list(m.children())
    if not children:
        own = sum(p.numel() for p in m.parameters(recurse=False))
        if own:
            log.warning(
                "no handler for %s: its %d parameters are counted without FLOPs", type(m).__name__, own
            )
            b._n_params += int(own)
    for c in children:
        _hook_modules(c, handlers, b, calls, hooks)


def _repeated_params(calls: list[_Call]) -> int:
    """The parameters counted more than once: weights shared by several calls (tied or reused modules) are
    parameters once."""
    seen: dict[int, int] = {}
    for mod, _, _, _ in calls:
        seen[id(mod)] = seen.get(id(mod), 0) + 1
    repeated = sum(
        (count - 1) * sum(p.numel() for p in mod.parameters())
        for mod in {id(m): m for m, _, _, _ in calls}.values()
        if (count := seen[id(mod)]) > 1
    )
    return int(repeated)
