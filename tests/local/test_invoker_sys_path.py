"""Each ``FunctionsInvoker`` loads ``functions/main.py`` through functions-framework's ``create_app``, which
appends the file's folder to ``sys.path`` at every load: a test process that built invokers test after test
carried thousands of copies, and every import lookup not yet cached walked them all (the in-process tests
took a fifth more CPU, more the longer a worker ran)."""

from __future__ import annotations

import sys

from zen_dev.local.invoke import FunctionsInvoker


def loaded(invoker: FunctionsInvoker) -> FunctionsInvoker:
    """Each of its functions' apps loaded (as their first messages would)."""
    for target in invoker.topics:
        invoker._client(target)
    return invoker


def test_invokers_built_one_after_another_leave_one_copy_of_the_functions_folder_on_sys_path(zen):
    loaded(FunctionsInvoker(zen))
    before = len(sys.path)
    for _ in range(3):
        loaded(FunctionsInvoker(zen))
    assert len(sys.path) == before, f"sys.path grew by {len(sys.path) - before} entries for three invokers"
