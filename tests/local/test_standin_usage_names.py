"""Each stand-in docs/how-to/local.md runs alone with `python -m zen_dev.local.X` names that command in its
usage line, the one argparse prints with every mistake in its flags: the webhook sink's said
`zen local webhook-sink`, a command `zen local` does not have, and the billing stand-in's `billing.py`."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

LOCAL_MD = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "local.md"
MODULES = sorted(set(re.findall(r"^python -m (zen_dev\.local\.\w+)", LOCAL_MD.read_text(), re.MULTILINE)))


def test_the_page_runs_the_stand_ins_alone():
    assert {"zen_dev.local.webhook_sink", "zen_dev.local.billing"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_stand_ins_usage_names_the_command_the_page_runs(module, capsys):
    with pytest.raises(SystemExit) as ended:
        importlib.import_module(module).main(["--no-such-flag"])
    assert ended.value.code == 2
    usage = capsys.readouterr().err.splitlines()[0]
    assert usage.startswith(f"usage: python -m {module} "), usage
