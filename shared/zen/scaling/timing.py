"""The planner's timings (``zen.scaling.model.Timing``) from the configuration's deadlines and scaling section."""

from __future__ import annotations

from zen.core.config import ZenConfig
from zen.scaling.model import Timing


def timing_from_config(config: ZenConfig) -> Timing:
    scaling = config.scaling
    return Timing(boot_timeout_s=config.deadlines.boot_timeout_s, idle_timeout_s=config.deadlines.idle_timeout_s,
                  block_s=scaling.stockout_block_s, max_block_s=scaling.max_stockout_block_s,
                  spill_after_s=scaling.spill_after_s, boot_estimate_s=scaling.boot_estimate_s,
                  idle_grace_s=scaling.idle_grace_s, hedge_risk=scaling.hedge_risk, keep_factor=scaling.keep_factor,
                  trust_s=scaling.stockout_memory_s, preference_s=scaling.preference_s,
                  cost_slack_s=scaling.cost_slack_s, hedge_price_ratio=scaling.hedge_price_ratio,
                  flex_start_estimate_s=scaling.flex_start_estimate_s, spare_boots=scaling.spare_boots,
                  agent_silence_s=config.deadlines.agent_silence_s,
                  flex_end_margin_s=config.deadlines.flex_end_margin_s)
