"""Whether a GPU's tensor-core figures are dense peaks: NVIDIA quotes "with sparsity" figures at twice them."""

from __future__ import annotations

from easlurm.model.hardware import GpuSpec

#: The dense tensor-core rates each architecture's boards have, as (TF32, BF16/FP16) multiples of their FP32
#: (CUDA-core) rate, from the datasheets and architecture whitepapers. A board's figures match one of them;
#: twice a dense rate is a sparsity figure. The catalogue's `bf16_tflops` is the FP16 tensor rate where a GPU
#: has no BF16 (Volta, Turing) and the packed FP16 rate on Pascal; `tf32_tflops` is the FP32 rate there.
DENSE_RATIOS: dict[str, tuple[tuple[float, float], ...]] = {
    # P100: packed FP16 at 2x FP32 (18.7 / 9.3); GP102 GeForce: FP16 no faster than FP32 in the catalogue
    "pascal": ((1.0, 2.0), (1.0, 1.0)),
    # V100: 125 FP16 tensor / 15.7 FP32 (SXM2), 112 / 14 (PCIe)
    "volta": ((1.0, 8.0),),
    # TU102/104 Quadro and T4: FP16 tensor with FP32 accumulate at 8x (130.5 / 16.3, 65 / 8.1); GeForce 4x
    "turing": ((1.0, 8.0), (1.0, 4.0)),
    # GA100: 156 TF32, 312 BF16 / 19.5; GA10x professional (A40, A10, A6000) 2x and 4x; GA10x GeForce 1x, 2x
    "ampere": ((8.0, 16.0), (2.0, 4.0), (1.0, 2.0)),
    # AD10x: L40S 183 TF32, 362.05 BF16 / 91.6, L4 60, 121 / 30.3; GeForce and L40-rated boards 1x, 2x
    "ada": ((2.0, 4.0), (1.0, 2.0)),
    # GH100: 494.7 TF32, 989.4 BF16 / 67 (SXM5); 378, 756 / 51 (PCIe)
    "hopper": ((7.4, 14.8),),
}
#: how far a figure may stand from a dense configuration (datasheets round, and clocks differ by a few %)
TOLERANCE = 0.04


def _near(x: float, y: float) -> bool:
    return abs(x / y - 1.0) <= TOLERANCE


def sparse_figure(spec: GpuSpec) -> str | None:
    """Why `spec`'s tensor figures are not dense peaks of its architecture, or None (also for an architecture
    with no table: Blackwell, a user GPU without one)."""
    configs = DENSE_RATIOS.get(spec.architecture)
    if not configs:
        return None
    ratios = (spec.tf32_tflops / spec.fp32_tflops, spec.bf16_tflops / spec.fp32_tflops)
    if any(_near(ratios[0], tf32) and _near(ratios[1], bf16) for tf32, bf16 in configs):
        return None
    dense = ", ".join(f"{tf32:g}x and {bf16:g}x" for tf32, bf16 in configs)
    top_tf32, top_bf16 = max(c[0] for c in configs), max(c[1] for c in configs)
    sparse = ratios[0] > top_tf32 * (1 + TOLERANCE) or ratios[1] > top_bf16 * (1 + TOLERANCE)
    return (
        f"tf32_tflops {spec.tf32_tflops:g} and bf16_tflops {spec.bf16_tflops:g} are {ratios[0]:.2f}x and "
        f"{ratios[1]:.2f}x fp32_tflops {spec.fp32_tflops:g}; dense {spec.architecture} boards run {dense}"
        + ("; above every dense rate: a figure with sparsity? (dense is half)" if sparse else "")
    )
