"""The console's page table (docs/how-to/console.md) renders as one row per page: a Markdown table row is one line,
so a row broken over two lines shows its end as a row of its own, under the wrong header."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "console.md"


def test_each_console_page_is_one_table_row():
    lines = DOC.read_text().splitlines()
    start = lines.index("| page | shows | the CLI's equivalent |")
    table = []
    for line in lines[start:]:
        if not line.strip():
            break
        table.append(line)
    broken = [line[:60] for line in table if not (line.startswith("| ") and line.rstrip().endswith("|"))]
    assert broken == [], broken
