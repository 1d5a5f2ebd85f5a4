"""Reports of a simulation: a terminal table, the JSON object, and with ``--out DIR`` the files
``summary.csv``, ``report.json`` (with the dollar keys when the scenario has prices), ``starts.csv``, ``vms.csv`` and ``plot.png`` (``zen_dev.sim.plot``;
without matplotlib the others are written and a message says so).
The files' columns: docs/reference/simulator.md#zen-simulate
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from zen_dev.sim.metrics import DOLLAR_KEYS, EXTRA_KEYS, GANG_KEYS, JSON_KEYS, RunResult
from zen_dev.sim.scenario import Scenario

TABLE_COLUMNS = (
    ("policy", "policy"), ("p50_start_s", "p50 s"), ("p95_start_s", "p95 s"), ("p99_start_s", "p99 s"),
    ("max_start_s", "max s"), ("never_started", "never"), ("vm_minutes", "VM-min"),
    ("wasted_vm_minutes", "wasted"), ("peak_vms", "peak"), ("api_calls", "API calls"),
    ("limit_violations", "limit viol"), ("busy_delete_attempts", "busy del"),
)
DOLLAR_COLUMNS = (
    ("usd", "USD"), ("usd_per_useful_gpu_hour", "USD/useful GPU-h"), ("usd_vs_floor", "x floor"),
    ("rework_gpu_hours", "rework GPU-h"),
)


def _values(result: RunResult) -> dict[str, Any]:
    """Every key of a result: the summary, the extras, and the dollars when the scenario has prices."""
    return {**result.summary(), **result.extras(), **(result.dollars() if result.priced else {}),
            **(result.gang_summary() if result.gang_starts else {})}


def json_report(results: dict[str, RunResult]) -> dict[str, Any]:
    """Exactly ``{"policies": {NAME: {JSON_KEYS..., DOLLAR_KEYS... with prices, GANG_KEYS... with gangs}}}`` (what ``--json`` prints)."""
    return {"policies": {name: {**result.summary(), **(result.dollars() if result.priced else {}),
                                **(result.gang_summary() if result.gang_starts else {})}
                         for name, result in results.items()}}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _fmt_dollars(key: str, value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if key in ("usd_per_useful_gpu_hour", "usd_vs_floor") else f"{value:,.2f}"


def format_table(results: dict[str, RunResult]) -> str:
    columns = TABLE_COLUMNS + (DOLLAR_COLUMNS if any(r.priced for r in results.values()) else ())
    rows = []
    for name, result in results.items():
        values = {"policy": name, **_values(result)}
        rows.append([_fmt_dollars(key, values.get(key)) if key in DOLLAR_KEYS else _fmt(values.get(key))
                     for key, _ in columns])
    headers = [title for _, title in columns]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def write_report(results: dict[str, RunResult], out_dir: str | Path, meta: dict[str, Any],
                 scenario: Scenario | None = None) -> list[str]:
    """Write the files listed in the module docstring (the plot shows ``scenario``'s capacity when
    given); returns messages for the user."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "summary.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        keys = JSON_KEYS + EXTRA_KEYS + (DOLLAR_KEYS if any(r.priced for r in results.values()) else ())
        keys += GANG_KEYS if any(r.gang_starts for r in results.values()) else ()
        writer.writerow(("policy",) + keys)
        for name, result in results.items():
            values = _values(result)
            writer.writerow([name] + ["" if values.get(k) is None else values[k] for k in keys])
    full = {**meta, "policies": {n: _values(r) for n, r in results.items()}}
    (out / "report.json").write_text(json.dumps(full, indent=2, default=str) + "\n")
    with (out / "starts.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("policy", "submit_s", "start_s"))
        for name, result in results.items():
            for submit, start in result.starts:
                writer.writerow((name, round(submit, 3), "" if start is None else round(start, 3)))
    with (out / "vms.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("policy", "t_s", "vms"))
        for name, result in results.items():
            writer.writerows((name, round(t, 3), n) for t, n in result.vm_series)
    messages = [f"wrote {out / 'summary.csv'}, report.json, starts.csv, vms.csv"]
    title = str(meta.get("scenario", ""))
    if scenario is not None and scenario.spec.description:
        title += f": {scenario.spec.description}"
    messages.append(write_plot(results, out / "plot.png", title=title, scenario=scenario))
    return messages


def write_plot(results: dict[str, RunResult], path: Path, title: str = "", scenario: Scenario | None = None) -> str:
    """``plot.png`` (see ``zen_dev.sim.plot``), or a message saying why it was skipped."""
    try:
        from zen_dev.sim.plot import build_figure, save_figure
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        return ("plot skipped: matplotlib is not installed (pip install matplotlib to get plot.png; "
                "the CSV files hold the same data)")
    save_figure(build_figure(results, scenario, title), path)
    return f"wrote {path}"
