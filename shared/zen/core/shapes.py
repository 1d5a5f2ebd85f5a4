"""What each machine type Zen knows holds (vCPUs, RAM, GPUs), the catalog's names for their GPUs, and the
machine types a cluster's GPUs need: read by prices (``zen.core.prices``) and by the configuration, which
refuses a cluster whose machine type (a2-highgpu-1g unless it says) does not hold its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """What one machine type holds: its family's SKUs (``A2``, ``A2 Ultra``, ``G2``, ``A3``), vCPUs, GiB of RAM, its
    GPUs (the catalog's name for the GPU, e.g. ``Nvidia Tesla A100``, and how many), and the GiB of Local SSD it comes
    with (a3-highgpu: 750 per GPU, a2-ultragpu: 375 per GPU; GCE bills them with the VM, which cannot run without)."""

    family: str
    vcpus: int
    ram_gib: float
    gpu: str
    gpus: int
    local_ssd_gib: int = 0


def _shapes() -> dict[str, Shape]:
    shapes = {f"a2-highgpu-{n}g": Shape("A2", 12 * n, 85.0 * n, "Nvidia Tesla A100", n) for n in (1, 2, 4, 8)}
    shapes["a2-megagpu-16g"] = Shape("A2", 96, 1360.0, "Nvidia Tesla A100", 16)
    shapes.update({f"a2-ultragpu-{n}g": Shape("A2 Ultra", 12 * n, 170.0 * n, "Nvidia Tesla A100 80GB", n, 375 * n)
                   for n in (1, 2, 4, 8)})
    for vcpus, gpus in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8)):
        shapes[f"g2-standard-{vcpus}"] = Shape("G2", vcpus, 4.0 * vcpus, "Nvidia L4", gpus)
    shapes.update({f"a3-highgpu-{n}g": Shape("A3", 26 * n, 234.0 * n, "Nvidia H100 80GB", n, 750 * n) for n in (1, 2, 4, 8)})
    return shapes


SHAPES = _shapes()
# A cluster's gpu_type (GCE's accelerator name) -> the catalog's name for it, as ``Shape.gpu`` gives it.
GPU_NAMES = {"nvidia-tesla-a100": "Nvidia Tesla A100", "nvidia-a100-80gb": "Nvidia Tesla A100 80GB",
             "nvidia-l4": "Nvidia L4", "nvidia-h100-80gb": "Nvidia H100 80GB"}


def holding(gpu_type: str, gpu_count: int) -> list[str]:
    """The known machine types that hold ``gpu_count`` GPUs of ``gpu_type``, fewest vCPUs first ([] for a
    GPU type Zen does not know)."""
    gpu = GPU_NAMES.get(gpu_type)
    return sorted((m for m, s in SHAPES.items() if s.gpu == gpu and s.gpus == gpu_count),
                  key=lambda m: (SHAPES[m].vcpus, m))


def machine_problem(machine_type: str, gpu_type: str, gpu_count: int) -> str | None:
    """Why ``machine_type`` cannot hold ``gpu_count`` x ``gpu_type`` (GCE refuses such a template, and its
    price would be the machine type's), naming the machine types that would; None when it can, or when Zen
    does not know the machine type or the GPU."""
    shape = SHAPES.get(machine_type)
    if shape is None or gpu_type not in GPU_NAMES or (shape.gpus, shape.gpu) == (gpu_count, GPU_NAMES[gpu_type]):
        return None
    fits = holding(gpu_type, gpu_count)
    return (f"machine_type: {machine_type} holds {shape.gpus} x {shape.gpu}, not the cluster's gpu_count "
            f"{gpu_count} x {gpu_type}" + (f"; machine types that do: {', '.join(fits)}" if fits else ""))
