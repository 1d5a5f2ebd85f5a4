"""GPU quotas: which Compute quota a cluster's VMs draw on, and whether one more VM fits under it.

Compute counts GPUs per project in each region by GPU family and provisioning model (``NVIDIA_L4_GPUS``
for standard VMs, ``PREEMPTIBLE_NVIDIA_L4_GPUS`` for spot and flex-start ones) and in all regions at
once (``GPUS_ALL_REGIONS``); the Compute regions API reports each region's quotas, the projects API
the project-wide ones (``zen.adapters.quotas`` reads them). A VM whose GPUs do not fit is refused with
QUOTA_EXCEEDED, whatever the zone's capacity: a quota, not capacity, holds the region back. How to
check and raise them: docs/how-to/deploy.md#gpu-quotas. Pure: no SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

ALL_REGIONS = "GPUS_ALL_REGIONS"
# Accelerator type -> its quota's GPU family, where the two differ by more than case and dashes.
_FAMILIES = {
    "nvidia-tesla-a100": "NVIDIA_A100", "nvidia-a100-80gb": "NVIDIA_A100_80GB", "nvidia-h100-80gb": "NVIDIA_H100",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA", "nvidia-h200-141gb": "NVIDIA_H200", "nvidia-tesla-t4": "NVIDIA_T4",
    "nvidia-tesla-v100": "NVIDIA_V100", "nvidia-tesla-p100": "NVIDIA_P100", "nvidia-tesla-p4": "NVIDIA_P4",
    "nvidia-l4": "NVIDIA_L4", "nvidia-b200": "NVIDIA_B200",
}
# The provisioning models (zen.core.provisioning) whose VMs count against the preemptible quotas.
_PREEMPTIBLE_MODELS = ("spot", "flex-start")


def named(message: str | None) -> str | None:
    """The quota a QUOTA_EXCEEDED message of Compute names (``Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 16.0 in
    region us-central1.``, or ``... Metric: compute.googleapis.com/gpus_all_regions.``), if it is one the scale tick
    reads (``GPUS_ALL_REGIONS``, a region's ``[PREEMPTIBLE_]NVIDIA_<family>_GPUS``: not a committed or virtual
    workstation one, nor ``GPUS_PER_GPU_FAMILY``); else None."""
    found = re.search(r"Quota '([A-Z0-9_]+)' exceeded", message or "") or re.search(
        r"Metric: compute\.googleapis\.com/([a-z0-9_]+)", message or "")
    metric = found.group(1).upper() if found else ""
    return metric if metric == ALL_REGIONS or (re.fullmatch(r"(PREEMPTIBLE_)?NVIDIA_[A-Z0-9_]+_GPUS", metric)
                                               and "_VWS_" not in metric) else None


def gpu_metric(gpu_type: str, model: str) -> str:
    """The regional quota a VM with ``gpu_type`` GPUs under provisioning ``model`` counts against."""
    family = _FAMILIES.get(gpu_type) or gpu_type.upper().replace("-", "_").replace("TESLA_", "")
    return f"{'PREEMPTIBLE_' if model in _PREEMPTIBLE_MODELS else ''}{family}_GPUS"


@dataclass(frozen=True)
class Quota:
    metric: str
    limit: float
    usage: float

    @property
    def free(self) -> float:
        return max(0.0, self.limit - self.usage)


@dataclass(frozen=True)
class Shortfall:
    """A quota that leaves no room for one more VM of a pool."""

    region: str
    quota: Quota
    scope: str  # the region, or "all regions"
    needed: int  # GPUs one VM takes

    def text(self) -> str:
        q = self.quota
        return (f"GPU quota {q.metric} ({self.scope}) holds {self.region} back, not capacity: "
                f"{q.usage:g} of {q.limit:g} GPUs in use, a VM needs {self.needed}")


def shortfall(gpu_type: str, gpu_count: int, region: str, models: tuple[str, ...], regional: Mapping[str, Quota],
              project: Mapping[str, Quota]) -> Shortfall | None:
    """The quota that refuses one more VM of ``gpu_count`` ``gpu_type`` GPUs in ``region`` (the region's own
    first, then all regions'); None when one fits, or the quotas are not known. ``models``: the provisioning
    models its VMs may have (a pool's: its own); the region's quota holds it back only when that of each is
    known and full."""
    full = [quota for model in models
            if (quota := regional.get(gpu_metric(gpu_type, model))) is not None and quota.free < gpu_count]
    if models and len(full) == len(models):
        return Shortfall(region, full[0], region, gpu_count)
    quota = project.get(ALL_REGIONS)
    if quota is not None and quota.free < gpu_count:
        return Shortfall(region, quota, "all regions", gpu_count)
    return None
