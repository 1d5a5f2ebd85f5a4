"""The simulator's plot (``plot.png`` of ``zen simulate --out``), built with matplotlib (dev-only).

Per policy, the GPU VMs paid for over time in front of the scenario's capacity per region (stockouts
hatched, ``max_vms`` dashed, job starts as a rug by region); beside them the time-to-start ECDF,
VM-minutes paid and wasted, and starts per region.
What it shows: docs/reference/simulator.md#zen-simulate
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from zen_dev.capacity.traces import is_unlimited
from zen_dev.sim.metrics import RunResult
from zen_dev.sim.scenario import Scenario

RIGHT_TITLES = ("time to start (ECDF)", "GPU VM-minutes per policy (cost)", "jobs started per region")
MAX_CAPACITY_POINTS = 20_000
_POLICY_COLOURS = colormaps["tab10"].colors
_REGION_COLOURS = colormaps["Dark2"].colors
_NO_REGION = "grey"


def capacity_by_region(scenario: Scenario, horizon_s: float) -> tuple[list[float], dict[str, list[int] | None]]:
    """Change times in ``[0, horizon_s)`` and, per region, the VMs its zones can hold at each (summed
    over the zones and the clusters' machine types); ``None`` for a region with unlimited capacity."""
    keys: dict[str, set[tuple[str, str]]] = {}
    for cluster in scenario.clusters:
        for region, zones in cluster.zones.items():
            keys.setdefault(region, set()).update((zone, cluster.machine_type) for zone in zones)
    schedule = scenario.capacity
    times = {0.0}
    for pairs in keys.values():
        for zone, machine_type in pairs:
            t: float | None = 0.0
            while len(times) < MAX_CAPACITY_POINTS:
                t = schedule.next_change(zone, machine_type, t)
                if t is None or t >= horizon_s:
                    break
                times.add(t)
    ordered = sorted(times)
    per_region: dict[str, list[int] | None] = {}
    for region, pairs in keys.items():
        values = [sum(schedule.capacity(z, m, t) for z, m in sorted(pairs)) for t in ordered]
        per_region[region] = None if any(is_unlimited(v) for v in values) else values
    return ordered, per_region


def _zero_spans(times: list[float], values: list[int], horizon_s: float) -> list[tuple[float, float]]:
    """The ``(start, end)`` periods where ``values`` (steps at ``times``) is zero."""
    spans: list[tuple[float, float]] = []
    for i, (t, v) in enumerate(zip(times, values)):
        end = times[i + 1] if i + 1 < len(times) else horizon_s
        if v == 0:
            if spans and spans[-1][1] == t:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((t, end))
    return spans


def _policy_title(name: str, result: RunResult) -> str:
    s = result.summary()
    p95 = "-" if s["p95_start_s"] is None else f"{s['p95_start_s']:,.0f} s"
    never = f", {s['never_started']} never started" if s["never_started"] else ""
    return (f"{name}: p95 start {p95}{never} · {s['vm_minutes']:,.0f} VM-min "
            f"({s['wasted_vm_minutes']:,.0f} wasted) · peak {s['peak_vms']} VMs")


def build_figure(results: dict[str, RunResult], scenario: Scenario | None = None, title: str = "") -> Figure:
    """The figure ``plot.png`` holds: one left panel per policy (titled ``NAME: ...``), then the three
    right panels titled :data:`RIGHT_TITLES`. Regions' starts come from ``RunResult.start_regions``."""
    names = list(results) or ["(no policy)"]
    n = len(names)
    horizon_s = max((r.horizon_s for r in results.values()), default=3600.0)
    unit, scale = ("min", 60.0) if horizon_s <= 3 * 3600 else ("h", 3600.0)
    regions = [r for c in scenario.clusters for r in c.zones] if scenario else []
    for result in results.values():
        regions += [region for _, region in result.start_regions]
    regions = list(dict.fromkeys(regions))
    region_colour = {r: _REGION_COLOURS[i % len(_REGION_COLOURS)] for i, r in enumerate(regions)}
    policy_colour = {name: _POLICY_COLOURS[i % len(_POLICY_COLOURS)] for i, name in enumerate(names)}

    fig = Figure(figsize=(15, max(6.5, 2.0 * n + 1.5)), layout="constrained")
    time_fig, side_fig = fig.subfigures(1, 2, width_ratios=(3, 2))
    left = list(time_fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0])
    right = list(side_fig.subplots(3, 1))

    handles = _draw_time_panels(left, names, results, scenario, horizon_s, scale, region_colour)
    left[-1].set_xlabel(f"simulated time ({unit})")
    left[-1].set_xlim(0, horizon_s / scale)
    _draw_ecdf(right[0], results, policy_colour)
    _draw_vm_minutes(right[1], results, policy_colour)
    _draw_region_starts(right[2], results, region_colour)
    # The title heads the legend: a suptitle and an "outside" legend overlap under constrained layout.
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 5), fontsize=9,
               frameon=False, title=title or None, title_fontsize=13)
    return fig


def _draw_time_panels(axes, names, results, scenario, horizon_s, scale, region_colour) -> list:
    """The small multiples; returns the legend handles."""
    times, capacity = capacity_by_region(scenario, horizon_s) if scenario else ([], {})
    drawn = {r: v for r, v in capacity.items() if v is not None}
    limit = sum(c.limits.max_vms for c in scenario.clusters) if scenario else None
    cap_total = max((sum(col) for col in zip(*drawn.values())), default=None) if drawn else None
    ceiling = min(x for x in (limit, cap_total) if x is not None) if (limit or cap_total) else 0
    x_cap = [t / scale for t in times] + [horizon_s / scale]
    for ax, name in zip(axes, names):
        result = results.get(name)
        if drawn:
            ys = [v + [v[-1]] for v in drawn.values()]
            ax.stackplot(x_cap, *ys, step="post", colors=[region_colour[r] for r in drawn], alpha=0.22, lw=0)
        for row, (region, values) in enumerate(drawn.items()):
            for start, end in _zero_spans(times, values, horizon_s):
                ax.axvspan(start / scale, end / scale, ymin=0.95 - 0.05 * row, ymax=1.0 - 0.05 * row,
                           facecolor="none", edgecolor=region_colour[region], hatch="////", lw=0)
        if limit is not None:
            ax.axhline(limit, color="0.35", ls="--", lw=1)
        if result is not None and result.vm_series:
            xs = [t / scale for t, _ in result.vm_series] + [result.horizon_s / scale]
            ys = [v for _, v in result.vm_series] + [result.vm_series[-1][1]]
            ax.step(xs, ys, where="post", color="black", lw=1.6)
        if result is not None:
            _draw_start_rug(ax, result, scale, region_colour)
            ax.set_title(_policy_title(name, result), loc="left", fontsize=10)
        ax.set_ylim(0, max(result.peak_vms if result else 0, ceiling, 1) * 1.2)  # an outlier keeps its own scale
        ax.set_ylabel("GPU VMs")
        ax.grid(alpha=0.3)
    handles: list = [Line2D([], [], color="black", lw=1.6, label="VMs paid for")]
    if limit is not None:
        handles.append(Line2D([], [], color="0.35", ls="--", lw=1, label="clusters' max_vms"))
    handles += [Patch(color=region_colour[r], alpha=0.35, label=f"capacity {r}") for r in drawn]
    unlimited = [r for r, v in capacity.items() if v is None]
    if unlimited:
        handles.append(Patch(color="none", label=f"unlimited capacity (not drawn): {', '.join(unlimited)}"))
    if any(_zero_spans(times, v, horizon_s) for v in drawn.values()):
        handles.append(Patch(facecolor="none", edgecolor="0.3", hatch="////", label="region stocked out (top strip)"))
    handles.append(Line2D([], [], color="0.3", marker="|", ls="none", ms=9, label="job starts (by region)"))
    return handles


def _draw_start_rug(ax, result: RunResult, scale: float, region_colour: dict) -> None:
    """Job starts as ticks along the bottom, one colour per region (grey when regions are unknown)."""
    if result.start_regions:
        by_region: dict[str, list[float]] = {}
        for t, region in result.start_regions:
            by_region.setdefault(region, []).append(t / scale)
        groups = [(xs, region_colour.get(r, _NO_REGION)) for r, xs in by_region.items()]
    else:
        groups = [([s / scale for _, s in result.starts if s is not None], _NO_REGION)]
    for xs, colour in groups:
        ax.plot(xs, [0.03] * len(xs), ls="none", marker="|", ms=9, color=colour, alpha=0.7,
                transform=ax.get_xaxis_transform())


def _draw_ecdf(ax, results: dict[str, RunResult], policy_colour: dict) -> None:
    waits_by = {name: sorted(max(w, 1.0) for w in r.waits()) for name, r in results.items()}
    values = [w for waits in waits_by.values() for w in waits]
    for rank, (name, waits) in enumerate(waits_by.items()):
        if waits:  # the first policy on top: it stays visible where curves coincide
            ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                    color=policy_colour[name], lw=1.6, label=name, zorder=3 + len(waits_by) - rank)
    wide = bool(values) and max(values) / min(values) > 30
    if wide:
        ax.set_xscale("log")
    xlabel = "time to start (s, log scale; < 1 s shown at 1 s)" if wide else "time to start (s)"
    ax.set(xlabel=xlabel, ylabel="fraction of jobs", ylim=(0, 1.02))
    ax.set_title(RIGHT_TITLES[0], fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if waits_by:
        ax.legend(loc="best", fontsize=8)


def _draw_vm_minutes(ax, results: dict[str, RunResult], policy_colour: dict) -> None:
    names = list(results)
    paid = [r.vm_seconds / 60.0 for r in results.values()]
    wasted = [max(0.0, r.wasted_seconds) / 60.0 for r in results.values()]
    colours = [policy_colour[n] for n in names]
    ax.barh(names, paid, color=colours, alpha=0.35, label="paid")
    ax.barh(names, wasted, color=colours, label="wasted")
    for y, (p, w) in enumerate(zip(paid, wasted)):
        ax.annotate(f"{p:,.0f} ({w:,.0f} wasted)", (p, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(paid, default=1.0) * 1.45 or 1.0)
    ax.set_xlabel("GPU VM-minutes: paid (light), wasted (dark)")
    ax.set_title(RIGHT_TITLES[1], fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def _draw_region_starts(ax, results: dict[str, RunResult], region_colour: dict) -> None:
    ax.set_title(RIGHT_TITLES[2], fontsize=10)
    if not any(r.start_regions for r in results.values()):
        ax.text(0.5, 0.5, "regions of starts not recorded in this run", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
        ax.set(xticks=[], yticks=[])
        return
    names = list(results)
    counts = {name: Counter(region for _, region in r.start_regions) for name, r in results.items()}
    left = [0] * len(names)
    for region, colour in region_colour.items():
        widths = [counts[name][region] for name in names]
        if any(widths):
            ax.barh(names, widths, left=left, color=colour, label=region)
            left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, default=1) * 1.4 or 1)
    ax.set_xlabel("jobs started (first start), by region")
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3, axis="x")


def save_figure(fig: Figure, path: str | Path) -> None:
    fig.savefig(path, dpi=110)
