"""`easlurm model measure`: time real training steps of zoo models (torch) for the oracle's calibration CSV.

The method is the one behind the shared H100 data: a warm-up of at least 3 steps and `warmup_s`, then a
window of N steps lasting at least `window_s`, synchronised before and after; power from the NVML
total-energy counter read right before and after the same window. Every configuration is measured once
per sweep; the CSV holds the mean of the sweeps and the individual runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.energy.gpus import GpuRef, job_gpus
from easlurm.energy.nvml import discover_nvml
from easlurm.errors import ConfigError, ModelError, SensorError
from easlurm.model.build import default_catalogue
from easlurm.model.fit.dataset import Measurement, write_measurements
from easlurm.model.hardware import match_device_name
from easlurm.model.workload import Precision
from easlurm.model.zoo import SHUFFLENET_WIDTHS, SMALL_IMAGE, canonical_name, default_size

log = logging.getLogger(__name__)

#: precisions `measure` runs (Precision names; bf16 is read as amp-bf16): what each sets is `set_precision`
PRECISIONS = ("fp32-strict", "fp32", "tf32", "amp-bf16")
OPTIMIZERS = ("adamw", "sgd")
#: What one step is: a training step (forward, backward, optimizer) or an inference forward pass.
MODES = ("train", "infer")
#: Zoo models `measure` can build, and the library each needs beyond torch.
TORCH_MODELS: dict[str, str] = {
    "shufflenet-small": "torch",
    "shufflenet-v2-cifar": "torch",
    "resnet50": "torchvision",
    "vgg16": "torchvision",
    "vit-b16": "torchvision",
    "vit-l16": "torchvision",
    "bert-base": "transformers",
    "bert-large": "transformers",
    "distilbert": "transformers",
    "albert-base": "transformers",
    "gpt2": "transformers",
    "tinyllama-1.1b": "transformers",
}
_TEXT_DEFAULT_SEQ = {"gpt2": 1024, "tinyllama-1.1b": 512}


@dataclass(frozen=True)
class MeasureConfig:
    """One configuration to time: a zoo model at a per-step (global) batch, precision and optimizer, on
    `n_gpus` data-parallel ranks over `n_nodes` nodes (the batch split evenly over the ranks)."""

    model: str
    batch: int
    precision: str
    optimizer: str = "adamw"
    seq_len: int | None = None
    image_size: int | None = None
    mode: str = "train"
    n_gpus: int = 1
    n_nodes: int = 1


@dataclass(frozen=True)
class Run:
    """One timed window. `avg_power_w` is None without an energy counter (CPU, no NVML); `comm_exposed_s`
    is None on one process (data-parallel runs: `exposed_comm_s`)."""

    step_time_s: float
    avg_power_w: float | None
    peak_mem_gib: float | None
    n_params: int
    steps: int
    comm_exposed_s: float | None = None


def exposed_comm_s(sync_step_s: float, local_step_s: float) -> float:
    """The communication a data-parallel step does not hide: its step time minus the same ranks' step
    time without gradient synchronisation, floored at 0 (noise can make the local step the slower)."""
    return max(0.0, sync_step_s - local_step_s)


@dataclass(frozen=True)
class Timing:
    """What `measure_one` needs to know about the method (seconds)."""

    warmup_s: float = 2.5
    window_s: float = 4.0
    min_warmup_steps: int = 3


def configurations(
    models: Sequence[str],
    batches: Sequence[int],
    precisions: Sequence[str],
    optimizer: str = "adamw",
    seq_len: int | None = None,
    image_size: int | None = None,
    gpus: Sequence[int] = (1,),
    nodes: int = 1,
) -> list[MeasureConfig]:
    """The sweep's configurations (model-major, then precision, GPU count, batch), validated: unknown
    names, a GPU count the nodes do not share evenly, or a batch the ranks do not, are one ConfigError each."""
    for g in gpus:
        if g < nodes or g % nodes:
            raise ConfigError(
                f"--gpus: {g} is not a multiple of --nodes {nodes} (every node runs as many ranks)"
            )
        for b in batches:
            if b % g:
                raise ConfigError(f"--batch: {b} does not split evenly over --gpus {g} (the batch is global)")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    precisions = [measured_precision(p) for p in precisions]
    out: list[MeasureConfig] = []
    for raw in models:
        try:
            name = canonical_name(raw)
        except ModelError as exc:
            raise ConfigError(f"--model: {exc}") from None
        if name not in TORCH_MODELS:
            raise ConfigError(
                f"--model: {name} has no torch implementation (measurable: {', '.join(TORCH_MODELS)})"
            )
        kind, default = default_size(name)
        size_seq = seq_len if kind == "seq_len" else None
        size_img = image_size if kind == "image_size" else None
        if kind == "seq_len" and size_seq is None:
            size_seq = default
        if kind == "image_size" and size_img is None:
            size_img = default
        for p in precisions:
            for g in gpus:
                for b in batches:
                    out.append(
                        MeasureConfig(
                            name, int(b), p, optimizer, size_seq, size_img, n_gpus=int(g), n_nodes=nodes
                        )
                    )
    return out


def import_torch() -> Any:
    """torch, or a one-line error naming the extra."""
    try:
        import torch
    except ImportError:
        raise ModelError("easlurm model measure needs torch: pip install 'easlurm[torch]'") from None
    return torch


def _need(module: str, model: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModelError(f"model {model} needs {module}: pip install 'easlurm[torch]' {module}") from None


# -- models ----------------------------------------------------------------------------------------------


def _shufflenet_v2(torch: Any, widths: tuple[int, int, int], classes: int, image: int) -> Any:
    """ShuffleNet-V2 in plain torch (torchvision's layout: stages 4/8/4, channels 24-widths-1024), with the
    zoo's CIFAR stem for small images (`zoo.SMALL_IMAGE`)."""
    nn = torch.nn

    def shuffle(x: Any) -> Any:
        b, c, h, w = x.shape
        return x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)

    def conv_bn(cin: int, cout: int, k: int, s: int, groups: int = 1, relu: bool = True) -> list[Any]:
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return [*layers, nn.ReLU(inplace=True)] if relu else layers

    class Unit(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.stride = stride
            half = cout // 2
            if stride > 1:
                self.branch1 = nn.Sequential(
                    *conv_bn(cin, cin, 3, stride, cin, False), *conv_bn(cin, half, 1, 1)
                )
            b2_in = cin if stride > 1 else half
            self.branch2 = nn.Sequential(
                *conv_bn(b2_in, half, 1, 1),
                *conv_bn(half, half, 3, stride, half, False),
                *conv_bn(half, half, 1, 1),
            )

        def forward(self, x: Any) -> Any:
            if self.stride == 1:
                a, b = x.chunk(2, dim=1)
                out = torch.cat((a, self.branch2(b)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
            return shuffle(out)

    channels = [24, *widths, 1024]
    if image <= SMALL_IMAGE:
        layers: list[Any] = conv_bn(3, channels[0], 3, 1)
    else:
        layers = [*conv_bn(3, channels[0], 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = channels[0]
    for repeats, cout in zip((4, 8, 4), channels[1:4]):
        layers.append(Unit(cin, cout, 2))
        layers += [Unit(cout, cout, 1) for _ in range(repeats - 1)]
        cin = cout
    layers += [
        *conv_bn(cin, channels[4], 1, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels[4], classes),
    ]
    return nn.Sequential(*layers)


def build(torch: Any, cfg: MeasureConfig, device: Any) -> tuple[Any, Callable[[Any], Any]]:
    """(module on `device`, loss of one forward pass), inputs created once on the device."""
    name = cfg.model
    b = cfg.batch
    if name in ("shufflenet-small", "shufflenet-v2-cifar", "resnet50", "vgg16", "vit-b16", "vit-l16"):
        size = cfg.image_size or (32 if name == "shufflenet-v2-cifar" else 224)
        classes = 100 if name == "shufflenet-v2-cifar" else 1000
        if name.startswith("shufflenet"):
            width = SHUFFLENET_WIDTHS["1.0x" if name == "shufflenet-v2-cifar" else "0.5x"]
            model = _shufflenet_v2(torch, width, classes, size)
        else:
            tv = _need("torchvision", name)
            ctor = {"resnet50": "resnet50", "vgg16": "vgg16", "vit-b16": "vit_b_16", "vit-l16": "vit_l_16"}[
                name
            ]
            kwargs: dict[str, Any] = {"image_size": cfg.image_size} if name.startswith("vit") else {}
            model = getattr(tv.models, ctor)(**kwargs)
        x = torch.randn(b, 3, size, size, device=device)
        y = torch.randint(0, classes, (b,), device=device)
        crit = torch.nn.CrossEntropyLoss()
        return model.to(device), lambda m: crit(m(x), y)
    tf = _need("transformers", name)
    seq = cfg.seq_len or _TEXT_DEFAULT_SEQ.get(name, 128)
    if name in ("bert-base", "bert-large", "distilbert", "albert-base"):
        conf = {
            "bert-base": lambda: tf.BertConfig(),
            "bert-large": lambda: tf.BertConfig(
                hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
            ),
            "distilbert": lambda: tf.DistilBertConfig(),
            "albert-base": lambda: tf.AlbertConfig(
                hidden_size=768, num_attention_heads=12, intermediate_size=3072
            ),
        }[name]()
        cls = {
            "bert-base": tf.BertForSequenceClassification,
            "bert-large": tf.BertForSequenceClassification,
            "distilbert": tf.DistilBertForSequenceClassification,
            "albert-base": tf.AlbertForSequenceClassification,
        }[name]
        model = cls(conf)
        ids = torch.randint(0, conf.vocab_size, (b, seq), device=device)
        labels = torch.randint(0, 2, (b,), device=device)
        return model.to(device), lambda m: m(input_ids=ids, labels=labels).loss
    if name == "gpt2":
        conf = tf.GPT2Config()
        model = tf.GPT2LMHeadModel(conf)
    else:  # tinyllama-1.1b
        conf = tf.LlamaConfig(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=22,
            num_attention_heads=32,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
        )
        model = tf.LlamaForCausalLM(conf)
    ids = torch.randint(0, conf.vocab_size, (b, seq), device=device)
    return model.to(device), lambda m: m(input_ids=ids, labels=ids).loss


def measured_precision(text: str) -> str:
    """A --precision value as the canonical name `measure` runs and writes (bf16 -> amp-bf16)."""
    try:
        name = Precision.parse(text).value
    except ModelError:
        name = ""
    if name not in PRECISIONS:
        raise ConfigError(f"--precision: expected one of {', '.join(PRECISIONS)}, got {text!r}")
    return name


# -- timing ----------------------------------------------------------------------------------------------


def set_precision(torch: Any, precision: str) -> None:
    """fp32-strict: TF32 off for matmuls and cuDNN; fp32: PyTorch's defaults, set explicitly (cuDNN in TF32,
    matmuls in FP32); tf32 and amp-bf16 (autocast over FP32 master weights): TF32 on for both."""
    torch.backends.cuda.matmul.allow_tf32 = precision in ("tf32", "amp-bf16")
    torch.backends.cudnn.allow_tf32 = precision != "fp32-strict"
    torch.backends.cudnn.benchmark = True


@dataclass
class Prepared:
    """A built, warmed-up configuration: `step()` runs one step asynchronously, `sync()` waits for the
    device; `peak_mem_gib()` is the peak memory allocated since the warm-up began (None on a CPU).
    `step_local()`, for a model wrapped in DistributedDataParallel, is a training step without gradient
    synchronisation (`no_sync`); None otherwise."""

    config: MeasureConfig
    step: Callable[[], None]
    sync: Callable[[], None]
    warm_step_s: float
    n_params: int
    peak_mem_gib: Callable[[], float | None]
    step_local: Callable[[], None] | None = None


def prepare(
    cfg: MeasureConfig,
    device: str,
    timing: Timing = Timing(),
    wrap: Callable[[Any], Any] | None = None,
    agree_max: Callable[[float], float] | None = None,
) -> Prepared:
    """Build one configuration and warm it up (at least `min_warmup_steps` and `warmup_s`).

    `wrap` wraps the built module (DistributedDataParallel); `agree_max` returns the largest value over
    the ranks, so that every rank runs the same number of warm-up steps (collectives must pair up)."""
    torch = import_torch()
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    set_precision(torch, cfg.precision)
    torch.manual_seed(0)
    model, loss_of = build(torch, cfg, dev)
    n_params = sum(int(p.numel()) for p in model.parameters())
    if wrap is not None:
        model = wrap(model)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    step, step_local = _step_functions(torch, cfg, dev, model, loss_of)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    n = _warm_up(cfg, step, sync, timing, t0, agree_max)

    def peak() -> float | None:
        return float(torch.cuda.max_memory_allocated(dev)) / 2**30 if cuda else None

    return Prepared(cfg, step, sync, (time.perf_counter() - t0) / n, n_params, peak, step_local)


def _step_functions(
    torch: Any, cfg: MeasureConfig, dev: Any, model: Any, loss_of: Callable[[Any], Any]
) -> tuple[Callable[[], None], Callable[[], None] | None]:
    """(one step, one step without gradient synchronisation or None): an inference forward pass, or a
    training step with the configuration's optimizer; bf16 runs under autocast over FP32 weights."""
    autocast = cfg.precision == "amp-bf16"
    step_local: Callable[[], None] | None = None
    if cfg.mode == "infer":
        model.eval()

        def step() -> None:
            with (
                torch.inference_mode(),
                torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast),
            ):
                loss_of(model)

    else:
        model.train()
        params = list(model.parameters())
        opt = (
            torch.optim.SGD(params, lr=1e-3, momentum=0.9)
            if cfg.optimizer == "sgd"
            else torch.optim.AdamW(params, lr=1e-4)
        )

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast):
                loss = loss_of(model)
            loss.backward()
            opt.step()

        if hasattr(model, "no_sync"):

            def step_local() -> None:
                with model.no_sync():  # forward and backward inside: DDP decides at forward time
                    step()

    return step, step_local


def _warm_up(
    cfg: MeasureConfig,
    step: Callable[[], None],
    sync: Callable[[], None],
    timing: Timing,
    t0: float,
    agree_max: Callable[[float], float] | None,
) -> int:
    """Run warm-up steps from `t0` until both minimums are met (on every rank, with `agree_max`); returns
    their number. A step that fails (out of memory, a shape the model cannot take) is one ModelError."""
    n = 0
    while True:
        more = n < timing.min_warmup_steps or time.perf_counter() - t0 < timing.warmup_s
        if agree_max is not None:
            more = agree_max(1.0 if more else 0.0) > 0
        if not more:
            break
        try:
            step()
        except (RuntimeError, ValueError) as exc:  # out of memory, shapes a model cannot take
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"{cfg.model} batch {cfg.batch} {cfg.precision}: {message}") from exc
        n += 1
        if n % 10 == 0:
            sync()
    sync()
    return n


@dataclass(frozen=True)
class Window:
    """One timed window: its steps, its length and the energy counter's increase over it (J, or None)."""

    steps: int
    window_s: float
    energy_j: float | None

    @property
    def step_time_s(self) -> float:
        return self.window_s / self.steps

    @property
    def avg_power_w(self) -> float | None:
        return None if self.energy_j is None else self.energy_j / self.window_s


def time_window(
    step: Callable[[], None],
    sync: Callable[[], None],
    steps: int,
    timing: Timing,
    energy_j: Callable[[], float | None] | None = None,
    agree_max: Callable[[float], float] | None = None,
    start: Callable[[], None] | None = None,
) -> Window:
    """Time `steps` steps, synchronised before and after, growing the count until the window lasts at
    least `window_s` (on the slowest rank: `agree_max`; `start` lines the ranks up before each try)."""
    while True:
        sync()
        if start is not None:
            start()
        e0 = energy_j() if energy_j else None
        w0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        window = time.perf_counter() - w0
        e1 = energy_j() if energy_j else None
        longest = agree_max(window) if agree_max is not None else window
        if longest >= timing.window_s or steps > 1_000_000:
            break
        steps = math.ceil(steps * timing.window_s / max(longest, 1e-9) * 1.05)
    return Window(steps, window, None if e0 is None or e1 is None else e1 - e0)


def first_window_steps(p: Prepared, timing: Timing) -> int:
    """The first try's step count: the window over the warm-up's mean step time."""
    return max(1, math.ceil(timing.window_s / max(p.warm_step_s, 1e-6)))


def measure_one(
    cfg: MeasureConfig,
    device: str,
    timing: Timing = Timing(),
    energy_j: Callable[[], float | None] | None = None,
) -> Run:
    """Build, warm up and time one configuration; `energy_j` reads a cumulative GPU energy counter (J)."""
    p = prepare(cfg, device, timing)
    w = time_window(p.step, p.sync, first_window_steps(p, timing), timing, energy_j)
    return Run(w.step_time_s, w.avg_power_w, p.peak_mem_gib(), p.n_params, w.steps)


def nvml_energy_reader(
    cuda_index: int = 0, module_name: str = "pynvml"
) -> tuple[Callable[[], float | None] | None, Callable[[], None]]:
    """(cumulative energy in J of the GPU torch calls cuda:`cuda_index`, close); (None, no-op) without NVML."""
    visible = job_gpus()
    if visible is None:
        refs = [GpuRef(str(cuda_index), index=cuda_index)]
    elif cuda_index < len(visible):
        refs = [visible[cuda_index]]
    else:
        return None, lambda: None
    sensors, statuses = discover_nvml(module_name, refs)
    opened = []
    for s in sensors:
        try:
            s.open()
        except SensorError as exc:
            log.warning("no power for %s: %s", s.name, exc)
            continue
        if s.mode.value != "energy":
            log.warning("%s has no energy counter; power column left empty", s.name)
            s.close()
            continue
        opened.append(s)
    if not opened:
        for st in statuses:
            log.info("NVML: %s", getattr(st, "reason", st))
        return None, lambda: None

    def read() -> float | None:
        for s in opened:
            s.want_exact()  # the counter itself, not the sensor's estimate between counter reads
        vals = [s.read() for s in opened]
        return None if any(v is None for v in vals) else float(sum(v for v in vals if v is not None))

    def close() -> None:
        for s in opened:
            s.close()

    return read, close


@dataclass(frozen=True)
class Result:
    """A configuration and its runs (one per sweep), averaged for the CSV."""

    config: MeasureConfig
    runs: tuple[Run, ...]
    gpu: str

    @property
    def step_time_s(self) -> float:
        return sum(r.step_time_s for r in self.runs) / len(self.runs)

    @property
    def avg_power_w(self) -> float | None:
        vals = [r.avg_power_w for r in self.runs]
        return None if any(v is None for v in vals) else sum(v for v in vals if v is not None) / len(vals)

    @property
    def peak_mem_gib(self) -> float | None:
        vals = [r.peak_mem_gib for r in self.runs if r.peak_mem_gib is not None]
        return max(vals) if vals else None

    @property
    def comm_exposed_s(self) -> float | None:
        vals = [r.comm_exposed_s for r in self.runs]
        return None if any(v is None for v in vals) else sum(v for v in vals if v is not None) / len(vals)


def measure(
    configs: Sequence[MeasureConfig],
    gpu: str,
    device: str,
    *,
    sweeps: int = 2,
    timing: Timing = Timing(),
    energy_j: Callable[[], float | None] | None = None,
    on_run: Callable[[MeasureConfig, Run], None] | None = None,
) -> list[Result]:
    """Every configuration once per sweep (whole sweeps in turn, as the shared data was made)."""
    if sweeps < 1:
        raise ConfigError("--sweeps must be >= 1")
    runs: dict[MeasureConfig, list[Run]] = {c: [] for c in configs}
    failed: set[MeasureConfig] = set()
    for _ in range(sweeps):
        for c in configs:
            if c in failed:
                continue
            try:
                r = measure_one(c, device, timing, energy_j)
            except ModelError as exc:
                log.warning("left out: %s", exc)
                failed.add(c)
                continue
            finally:
                if device.startswith("cuda"):  # the last model is gone: give its memory back
                    import_torch().cuda.empty_cache()
            runs[c].append(r)
            if on_run:
                on_run(c, r)
    done = [Result(c, tuple(runs[c]), gpu) for c in configs if c not in failed]
    if not done:
        raise ModelError(f"no configuration could be measured ({len(failed)} failed; see the warnings)")
    return done


def write_results(results: Sequence[Result], path: str, source: str, header_comment: str = "") -> None:
    """The calibration CSV (dataset.COLUMNS) plus n_params and the individual runs."""
    rows = []
    extra = []
    for r in results:
        c = r.config
        rows.append(
            Measurement(
                model=c.model,
                batch=c.batch,
                precision=c.precision,
                n_gpus=c.n_gpus,
                n_nodes=c.n_nodes,
                gpu=r.gpu,
                step_time_s=round(r.step_time_s, 6),
                avg_power_w=None if r.avg_power_w is None else round(r.avg_power_w, 1),
                seq_len=c.seq_len,
                image_size=c.image_size,
                optimizer=c.optimizer,
                source=source,
                peak_mem_gib=None if r.peak_mem_gib is None else round(r.peak_mem_gib, 2),
                comm_exposed_s=None if r.comm_exposed_s is None else round(r.comm_exposed_s, 6),
            )
        )
        extra.append(
            {
                "n_params": r.runs[0].n_params,
                "step_time_s_runs": ";".join(f"{x.step_time_s:.6f}" for x in r.runs),
                "avg_power_w_runs": ";".join(
                    "" if x.avg_power_w is None else f"{x.avg_power_w:.1f}" for x in r.runs
                )
                if r.avg_power_w is not None
                else "",
            }
        )
        if r.comm_exposed_s is not None:  # data-parallel rows only: the column appears with them
            extra[-1]["comm_exposed_s_runs"] = ";".join(f"{x.comm_exposed_s:.6f}" for x in r.runs)
    write_measurements(rows, path, header_comment=header_comment, extra=extra)


def default_device() -> str:
    torch = import_torch()
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def device_gpu_name(device: str) -> str:
    """The CSV's gpu column when --gpu is not given: 'cpu', the catalogue key whose name is the CUDA
    device's (user catalogue included), else the device name as a slug (then calibrate needs --hardware)."""
    torch = import_torch()
    if not device.startswith("cuda"):
        return "cpu"
    name = str(torch.cuda.get_device_name(torch.device(device)))
    key = match_device_name(default_catalogue(), name)
    if key is None:
        key = "-".join(name.lower().replace("nvidia", "").split())
        log.warning(
            "GPU %r is not in the catalogue: gpu column %r; give --gpu or add it with --hardware", name, key
        )
    return key
