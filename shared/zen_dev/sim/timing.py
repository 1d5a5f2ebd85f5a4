"""A scenario's ``timing:`` (fields of ``zen.scaling.model.Timing`` given to every policy), checked as production
checks the configuration each field comes from (``zen.scaling.timing``): a value production never builds is
refused, naming ``timing.<field>``. Format: docs/reference/simulator.md#the-simulators-scenario-file
"""

from __future__ import annotations

import operator
from typing import Any

from pydantic import BaseModel

from zen.core.config import ClusterConfig, Deadlines, Scaling
from zen.scaling.model import Timing

# Timing field -> the configuration's model and field production fills it from (zen.scaling.timing; the start
# bound is the job's cluster's, ClusterOrchestrator) and how the configuration names it.
SOURCES: dict[str, tuple[type[BaseModel], str, str]] = {
    "boot_timeout_s": (Deadlines, "boot_timeout_s", "deadlines.boot_timeout_s"),
    "idle_timeout_s": (Deadlines, "idle_timeout_s", "deadlines.idle_timeout_s"),
    "flex_end_margin_s": (Deadlines, "flex_end_margin_s", "deadlines.flex_end_margin_s"),
    "block_s": (Scaling, "stockout_block_s", "scaling.stockout_block_s"),
    "max_block_s": (Scaling, "max_stockout_block_s", "scaling.max_stockout_block_s"),
    "trust_s": (Scaling, "stockout_memory_s", "scaling.stockout_memory_s"),
    "max_start_wait_s": (ClusterConfig, "max_start_wait_s", "a cluster's max_start_wait_s"),
    **{name: (Scaling, name, f"scaling.{name}") for name in (
        "spill_after_s", "boot_estimate_s", "idle_grace_s", "hedge_risk", "preference_s", "keep_factor",
        "cost_slack_s", "hedge_price_ratio", "flex_start_estimate_s", "spare_boots")},
}
_OPS = (("gt", ">", operator.gt), ("ge", ">=", operator.ge), ("lt", "<", operator.lt), ("le", "<=", operator.le))


def timing_problem(timing: dict[str, Any]) -> str | None:
    """Why ``timing`` is no Timing production builds (an unknown field, or a value outside its configuration
    field's bounds), or None. ``agent_silence_s``, which production derives from two heartbeat deadlines > 0,
    is seconds > 0."""
    unknown = set(timing) - set(Timing.__dataclass_fields__)
    if unknown:
        return (f"unknown timing field(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(Timing.__dataclass_fields__)}")
    for name, value in timing.items():
        if name == "agent_silence_s":
            if not value > 0:
                return f"timing.agent_silence_s: must be > 0 (got {value:g})"
            continue
        model, field, named = SOURCES[name]
        for constraint in model.model_fields[field].metadata:
            for attr, sign, holds in _OPS:
                bound = getattr(constraint, attr, None)
                if bound is not None and not holds(value, bound):
                    return (f"timing.{name}: must be {sign} {bound} (got {value:g}), as {named} is in production's "
                            "configuration")
    return None
