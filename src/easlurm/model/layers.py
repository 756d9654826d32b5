"""Analytical per-layer handlers (thesis 4.3.4) that accumulate one model's per-sample workload."""

from __future__ import annotations

from dataclasses import dataclass, field

from easlurm.errors import ModelError
from easlurm.model.workload import Optimizer, Precision, Workload

#: reduction depth (C_in*k*k/groups) under which a grouped convolution is bandwidth-bound (no tensor cores)
DENSE_CONV_MIN_DEPTH = 64.0

#: output elements of one tile of an FP32 implicit-GEMM convolution kernel (128 x 64, between the 64 x 64 and
#: 128 x 128 tiles such kernels run): the unit the last wave is counted in (`t_conv_wave_s`)
CONV_TILE_ELEMS = 128.0 * 64.0

#: ALU FLOPs per element of an activation function (forward; backward costs about the same).
ACT_FLOPS = {"relu": 1.0, "gelu": 14.0, "silu": 5.0, "tanh": 5.0, "sigmoid": 4.0, "identity": 0.0}


@dataclass
class WorkloadBuilder:
    """Accumulates layer workloads; every method takes per-sample shapes and a `repeat` count.

    `shared=True` (ALBERT-style weight sharing) counts parameters once while every use still reads them.
    `fused_attention=False` runs every `attention` eagerly (matmul, softmax, dropout, matmul), as NVIDIA's
    DeepLearningExamples BERT does, whatever the model's own default.
    """

    precision: Precision = Precision.BF16
    fused_attention: bool = True
    _t: dict[str, float] = field(default_factory=dict)
    _n_params: int = 0
    #: repeat count -> [activation bytes held per sample by layers repeated that often, the smallest tensor
    #: one of them holds]: the repeated blocks activation checkpointing recomputes (`ckpt_act_mem`)
    _stack: dict[int, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.precision = Precision.parse(self.precision)
        for key in [
            "gemm_f",
            "gemm_b",
            "conv_f",
            "conv_b",
            "alu_f",
            "alu_b",
            "act_bytes",
            "weight_bytes",
            "kernels",
            "elem",
            "act_mem",
            "gm",
            "gk",
            "gn",
            "cc",
            "cs",
            "ws",
            "wsf",
            "attn_f",
            "attn_b",
            "conv_io",
            "host_ops",
            "dw_f",
            "dw_b",
            "conv_tail",
            "conv_tiles",
        ]:
            self._t[key] = 0.0

    @property
    def n_params(self) -> int:
        return self._n_params

    @property
    def _s(self) -> float:
        return float(self.precision.act_bytes)

    def _weights(self, n_w: float, repeat: int, shared: bool) -> None:
        """Parameters (counted once when shared) and the weight traffic of every use."""
        self._n_params += int(n_w) * (1 if shared else repeat)
        cast = 6.0 if self.precision.mixed else 0.0  # autocast reads FP32 and writes a low-precision copy
        self._t["weight_bytes"] += repeat * n_w * (2.0 * self._s + 4.0 + cast)
        self._t["wsf"] = max(self._t["wsf"], n_w * self._s)

    def _acts(
        self, fwd_elems: float, bwd_elems: float, out_elems: float, ws_elems: float, repeat: int
    ) -> None:
        t = self._t
        t["act_bytes"] += repeat * (fwd_elems + bwd_elems) * self._s
        self._held(out_elems * self._s, repeat, smallest=True)
        t["ws"] = max(t["ws"], ws_elems * self._s)

    def _held(self, nbytes: float, repeat: int, smallest: bool = False) -> None:
        """Activation bytes per sample one layer keeps for its backward pass, `repeat` times."""
        self._t["act_mem"] += repeat * nbytes
        if repeat > 1 and nbytes > 0:
            held = self._stack.setdefault(repeat, [0.0, float("inf")])
            held[0] += repeat * nbytes
            if smallest:
                held[1] = min(held[1], nbytes)

    def ckpt_act_mem(self) -> float:
        """Activation bytes per sample kept under per-block activation checkpointing: each block of the
        deepest-held repeated stack keeps only its input (the smallest tensor its layers hold), and one
        block's activations are alive while it is recomputed; layers outside the stack keep theirs."""
        if not self._stack:
            return self._t["act_mem"]
        repeat, (held, smallest) = max(self._stack.items(), key=lambda kv: kv[1][0])
        if smallest == float("inf"):
            smallest = held / repeat
        return self._t["act_mem"] - held + held / repeat + repeat * smallest

    def _ops(self, kernels: float, host_ops: float, repeat: int) -> None:
        """GPU kernels of forward + backward, and forward operations dispatched by the host (Python + ATen)."""
        self._t["kernels"] += repeat * kernels
        self._t["host_ops"] += repeat * host_ops

    def python_ops(self, n: float, repeat: int = 1) -> None:
        """Host-only operations (view, transpose, reshape, split, mask handling): no GPU work, host time only."""
        self._t["host_ops"] += repeat * n

    def _check(self, **dims: float) -> None:
        for name, value in dims.items():
            if not (value > 0):
                raise ModelError(f"layer dimension {name} must be > 0, got {value!r}")

    def linear(
        self,
        tokens: float,
        d_in: int,
        d_out: int,
        bias: bool = True,
        repeat: int = 1,
        shared: bool = False,
        tied: bool = False,
    ) -> None:
        """y = x W^T + b on `tokens` rows per sample: GEMM M=tokens, K=d_in, N=d_out.

        `tied=True` reuses weights counted elsewhere (GPT-2's LM head shares the embedding).
        """
        self._check(tokens=tokens, d_in=d_in, d_out=d_out, repeat=repeat)
        f = 2.0 * tokens * d_in * d_out
        t = self._t
        t["gemm_f"] += repeat * f
        t["gemm_b"] += repeat * 2.0 * f
        if bias:
            t["alu_f"] += repeat * tokens * d_out
            t["alu_b"] += repeat * tokens * d_out
        w = repeat * f
        t["gm"] += w * tokens
        t["gk"] += w * d_in
        t["gn"] += w * d_out
        n_w = d_in * d_out + (d_out if bias else 0)
        self._weights(n_w, repeat, shared)
        if tied:
            self._n_params -= int(n_w) * (1 if shared else repeat)
        self._acts(
            tokens * (d_in + d_out),
            tokens * (2 * d_in + d_out),
            tokens * d_in,
            tokens * (d_in + d_out),
            repeat,
        )
        self._ops(
            4.0 + (2.0 if self.precision.mixed else 0.0), 1.0 + (1.0 if self.precision.mixed else 0.0), repeat
        )

    def conv2d(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        h_out: int,
        w_out: int,
        stride: int = 1,
        groups: int = 1,
        bias: bool = False,
        repeat: int = 1,
    ) -> None:
        """2-D convolution as implicit GEMM: reduction depth C_in*k*k/groups over h_out*w_out pixels."""
        self._check(c_in=c_in, c_out=c_out, kernel=kernel, h_out=h_out, w_out=w_out, groups=groups)
        if c_in % groups or c_out % groups:
            raise ModelError(f"conv2d: groups={groups} must divide c_in={c_in} and c_out={c_out}")
        depth = c_in * kernel * kernel / groups
        pixels = float(h_out * w_out)
        f = 2.0 * depth * c_out * pixels
        t = self._t
        in_elems = c_in * (h_out * stride) * (w_out * stride)
        out_elems = c_out * pixels
        if groups > 1 and depth < DENSE_CONV_MIN_DEPTH:
            # depthwise / thin grouped convolution: too little reuse for tensor cores; its kernels run far
            # below the CUDA-core peak (beta_dw)
            t["dw_f"] += repeat * f
            t["dw_b"] += repeat * 2.0 * f
            t["elem"] += repeat * out_elems
        else:
            t["conv_f"] += repeat * f
            t["conv_b"] += repeat * 2.0 * f
            w = repeat * f
            t["cc"] += w * depth
            t["cs"] += w * pixels
            t["conv_io"] += repeat * 3.0 * (in_elems + out_elems) * self._s
            # the reduction depths of its forward, weight-gradient and input-gradient kernels (the last wave
            # of each kernel's output tiles: `t_conv_wave_s`); a stem on the RGB image has no input gradient
            kdepth = 2.0 * depth + (c_out * kernel * kernel / groups if c_in > 3 else 0.0)
            t["conv_tail"] += repeat * kdepth
            t["conv_tiles"] += repeat * kdepth * pixels * c_out / CONV_TILE_ELEMS
        if bias:
            t["alu_f"] += repeat * c_out * pixels
            t["alu_b"] += repeat * c_out * pixels
        self._weights(depth * c_out + (c_out if bias else 0), repeat, False)
        self._acts(in_elems + out_elems, 2 * in_elems + out_elems, in_elems, in_elems + out_elems, repeat)
        self._ops(
            3.0 + (2.0 if self.precision.mixed else 0.0), 1.0 + (1.0 if self.precision.mixed else 0.0), repeat
        )

    def attention(
        self,
        seq: int,
        heads: int,
        head_dim: int,
        flash: bool = True,
        repeat: int = 1,
        causal: bool = False,
        dropout: bool = False,
    ) -> None:
        """Scaled dot-product attention core (QK^T, softmax, AV), without the projections.

        `flash=True` is a fused kernel (torch SDPA's flash / memory-efficient backends, the default of
        torch >= 2.0 models): scores never reach HBM, backward recomputes them, causal masks skip half the
        blocks. Its FLOPs are kept apart (`attn`): the fused kernels use tensor cores only in 16-bit precision.
        `flash=False` is eager attention that writes the scores, softmax and dropout mask to HBM.
        """
        self._check(seq=seq, heads=heads, head_dim=head_dim)
        flash = flash and self.fused_attention
        s, h, d = float(seq), float(heads), float(head_dim)
        f = 4.0 * s * s * h * d * (0.5 if causal and flash else 1.0)
        t = self._t
        t["alu_f"] += repeat * 5.0 * h * s * s
        t["alu_b"] += repeat * 4.0 * h * s * s
        qkvo = 4.0 * s * h * d
        if flash:
            t["attn_f"] += repeat * f
            t["attn_b"] += repeat * 2.5 * f  # backward recomputes QK^T
            self._acts(qkvo, 2.0 * qkvo, qkvo, qkvo, repeat)
            self._ops(3.0, 1.0, repeat)
        else:
            t["gemm_f"] += repeat * f
            t["gemm_b"] += repeat * 2.0 * f
            w = repeat * f
            t["gm"] += w * s * h
            t["gk"] += w * (d + s) / 2.0
            t["gn"] += w * (s + d) / 2.0
            scores = h * s * s * (2.0 if dropout else 1.0)
            # kept for the backward: the softmax output, and with dropout its output and one-byte mask (the
            # scores themselves are not: softmax's gradient needs its output only)
            self._acts(qkvo + 4.0 * scores, 2.0 * qkvo + 6.0 * scores, qkvo + scores, qkvo + scores, repeat)
            if dropout:
                self._held(h * s * s, repeat)
            self._ops(12.0, 5.0, repeat)
        t["elem"] += repeat * h * s * s

    def norm(self, elems: float, channels: int, kind: str = "layernorm", repeat: int = 1) -> None:
        """LayerNorm / RMSNorm / BatchNorm over `elems` elements per sample with `channels` features."""
        self._check(elems=elems, channels=channels)
        fl = {"layernorm": 8.0, "rmsnorm": 5.0, "batchnorm": 8.0}.get(kind)
        if fl is None:
            raise ModelError(f"unknown norm kind {kind!r} (known: layernorm, rmsnorm, batchnorm)")
        t = self._t
        t["alu_f"] += repeat * fl * elems
        t["alu_b"] += repeat * 2.0 * fl * elems
        t["elem"] += repeat * elems
        self._weights(channels * (1 if kind == "rmsnorm" else 2), repeat, False)
        self._acts(2 * elems, 3 * elems, elems, 2 * elems, repeat)
        if self.precision.mixed and kind != "batchnorm":
            # autocast runs layer norms in FP32: a cast in, an FP32 output, a cast back at the next GEMM
            t["act_bytes"] += repeat * elems * (2.0 + 4.0 + 4.0 + 2.0) * 2.0
            self._ops(5.0, 3.0, repeat)
        else:
            self._ops(3.0, 1.0, repeat)

    def rmsnorm_eager(self, elems: float, channels: int, repeat: int = 1) -> None:
        """RMSNorm written as Python tensor operations (cast to FP32, pow, mean, rsqrt, mul, cast, mul), as
        Hugging Face's Llama and torch's composite `rms_norm` run it: seven kernels forward and about twelve
        backward. The add and rsqrt act on one value per row; the casts exist under autocast only.

        HBM bytes per element, FP32 = 4, s = activation bytes: forward pow 8, mean 4, x*rsqrt 8, weight 2s;
        backward weight 4s (input and weight gradients), x*rsqrt 16, pow 8, summing the two gradients 12;
        under autocast each cast adds s+4 forward and again backward."""
        self._check(elems=elems, channels=channels)
        t = self._t
        t["alu_f"] += repeat * 5.0 * elems
        t["alu_b"] += repeat * 10.0 * elems
        t["elem"] += repeat * elems
        self._weights(channels, repeat, False)
        s = self._s
        casts = 2.0 * (s + 4.0) if self.precision.mixed else 0.0
        t["act_bytes"] += repeat * elems * ((20.0 + 2.0 * s) + (36.0 + 4.0 * s) + 2.0 * casts)
        self._held(elems * 4.0 * 4.0, repeat)
        t["ws"] = max(t["ws"], 2 * elems * 4.0)
        self._ops(19.0, 7.0, repeat)

    def activation(self, elems: float, kind: str = "relu", repeat: int = 1) -> None:
        """Pointwise activation function; `gelu_tanh` is GPT-2's `gelu_new`, written as eight Python tensor
        operations (pow, mul, add, mul, tanh, add, mul, mul) that each make a pass over the activations. Under
        autocast `pow` runs in FP32 and type promotion keeps the rest there: its passes move FP32 elements
        whatever the activations' precision."""
        self._check(elems=elems)
        if kind not in ACT_FLOPS and kind != "gelu_tanh":
            raise ModelError(f"unknown activation {kind!r} (known: {', '.join([*ACT_FLOPS, 'gelu_tanh'])})")
        t = self._t
        if kind == "gelu_tanh":
            t["alu_f"] += repeat * 10.0 * elems
            t["alu_b"] += repeat * 20.0 * elems
            t["elem"] += repeat * elems
            k = 4.0 / self._s  # FP32 passes, counted in activation-sized elements
            self._acts(8 * 2.3 * k * elems, 12 * 3.0 * k * elems, 6 * k * elems, 2 * k * elems, repeat)
            self._ops(20.0, 8.0, repeat)
            return
        t["alu_f"] += repeat * ACT_FLOPS[kind] * elems
        t["alu_b"] += repeat * ACT_FLOPS[kind] * elems
        t["elem"] += repeat * elems
        self._acts(2 * elems, 3 * elems, elems, 2 * elems, repeat)
        self._ops(2.0, 1.0, repeat)

    def dropout(self, elems: float, repeat: int = 1) -> None:
        """Training-mode dropout: writes the output and a one-byte mask; backward reads the mask."""
        self._check(elems=elems)
        t = self._t
        t["alu_f"] += repeat * 2.0 * elems
        t["alu_b"] += repeat * elems
        t["elem"] += repeat * elems
        s = self._s
        t["act_bytes"] += repeat * elems * (2.0 * s + 1.0 + 2.0 * s + 1.0)
        self._held(elems * 1.0, repeat)
        self._ops(2.0, 1.0, repeat)

    def elementwise(self, elems: float, operands: int = 2, repeat: int = 1) -> None:
        """Residual add, gating multiply, dropout, scaling: one ALU op per element."""
        self._check(elems=elems)
        t = self._t
        t["alu_f"] += repeat * elems
        t["alu_b"] += repeat * (operands - 1) * elems
        t["elem"] += repeat * elems
        self._acts((operands + 1) * elems, (operands + 1) * elems, 0.0, (operands + 1) * elems, repeat)
        self._ops(2.0, 1.0, repeat)

    def embedding(self, tokens: float, vocab: int, dim: int, repeat: int = 1) -> None:
        """Lookup table: no FLOPs forward, a scatter-add and a dense gradient write backward."""
        self._check(tokens=tokens, vocab=vocab, dim=dim)
        t = self._t
        self._n_params += vocab * dim * repeat
        t["weight_bytes"] += repeat * vocab * dim * 8.0
        t["alu_b"] += repeat * tokens * dim
        t["elem"] += repeat * tokens * dim
        self._acts(2 * tokens * dim, 2 * tokens * dim, 0.0, tokens * dim, repeat)
        self._ops(3.0, 1.0, repeat)

    def pool(self, elems_in: float, elems_out: float, repeat: int = 1) -> None:
        """Max/average pooling."""
        self._check(elems_in=elems_in, elems_out=elems_out)
        t = self._t
        t["alu_f"] += repeat * elems_in
        t["alu_b"] += repeat * elems_in
        t["elem"] += repeat * elems_in
        self._acts(elems_in + elems_out, elems_in + elems_out, elems_out, elems_in + elems_out, repeat)
        self._ops(2.0, 1.0, repeat)

    def loss(self, tokens: float, classes: int, fp32_logits: bool = False) -> None:
        """Softmax cross-entropy over `classes` logits per token (FP32 under autocast).

        `fp32_logits=True` is a language-model head's loss as current Hugging Face (labels are shifted,
        not the logits) and torchtitan write it: logits upcast to FP32 (under autocast only; FP32 logits are
        not copied), log-softmax, NLL, and the same chain backward. HBM bytes per logit: log-softmax 8
        forward; the NLL gradient 4 and log-softmax's backward 12; the upcast s+4 each way: 24 in FP32, 36
        under autocast (about 16 for a plain cross-entropy).
        """
        self._check(tokens=tokens, classes=classes)
        n = tokens * classes
        t = self._t
        t["alu_f"] += 5.0 * n
        t["alu_b"] += 2.0 * n
        t["elem"] += n
        if fp32_logits:
            t["act_bytes"] += (24.0 + (2.0 * (self._s + 4.0) if self.precision.mixed else 0.0)) * n
            t["act_mem"] += 12.0 * n
            self._ops(12.0, 6.0, 1)
        else:
            t["act_bytes"] += 4.0 * n * 4.0
            self._ops(4.0, 2.0, 1)

    def build(
        self,
        name: str,
        family: str | None = None,
        optimizer: str | Optimizer = Optimizer.ADAMW,
        seq_len: int | None = None,
        image_size: int | None = None,
    ) -> Workload:
        """Freeze the accumulated counts into a Workload (eq. 4.6 weighted means)."""
        t = self._t
        gemm_w = max(t["gemm_f"], 1e-30)  # dimensions are weighted by forward FLOPs
        conv_w = max(t["conv_f"], 1e-30)
        if self._n_params <= 0:
            raise ModelError(f"workload {name!r} has no parameters")
        return Workload(
            name=name,
            family=family or name,
            precision=self.precision,
            optimizer=Optimizer.parse(optimizer),
            n_params=self._n_params,
            flops_gemm_f=t["gemm_f"],
            flops_gemm_b=t["gemm_b"],
            flops_conv_f=t["conv_f"],
            flops_conv_b=t["conv_b"],
            flops_alu_f=t["alu_f"],
            flops_alu_b=t["alu_b"],
            act_bytes=t["act_bytes"],
            weight_bytes=t["weight_bytes"],
            kernels=t["kernels"],
            gemm_m=t["gm"] / gemm_w,
            gemm_k=t["gk"] / gemm_w,
            gemm_n=t["gn"] / gemm_w,
            conv_c=t["cc"] / conv_w,
            conv_spatial=t["cs"] / conv_w,
            elem=t["elem"],
            act_mem_bytes=t["act_mem"],
            working_set_bytes=t["ws"],
            working_set_fixed_bytes=t["wsf"],
            flops_attn_f=t["attn_f"],
            flops_attn_b=t["attn_b"],
            conv_io_bytes=t["conv_io"],
            host_ops=t["host_ops"],
            flops_dw_f=t["dw_f"],
            flops_dw_b=t["dw_b"],
            conv_tail_depth=t["conv_tail"],
            conv_tail_tiles=t["conv_tiles"] / max(t["conv_tail"], 1e-30),
            seq_len=seq_len,
            image_size=image_size,
            ckpt_act_mem_bytes=self.ckpt_act_mem(),
            blocks=max(self._stack.items(), key=lambda kv: kv[1][0])[0] if self._stack else 1,
        )
