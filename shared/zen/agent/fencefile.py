"""The file whose existence powers the VM off (``zen-fence.path``, written by the startup script): the agent's fence
(``zen.agent.leftover.fence_vm``) and the job's supervisor (``zen.agent.launch``) write it. Standard library only
(the supervisor loads it from its file)."""

import contextlib
import os
import threading


def add_reason(path: str, reason: str) -> None:
    """Add ``reason`` as a line of ``path``, which appears whole: written under another name, then renamed. The root
    unit starts as soon as the path exists and copies the file to the journal; a file still being written (opened,
    its line not yet in) gave the journal nothing. Raises ``OSError``."""
    staged = f"{path}.{os.getpid()}.{threading.get_ident()}"
    try:
        try:
            with open(path) as earlier:
                before = earlier.read()
        except FileNotFoundError:
            before = ""
        with open(staged, "w") as out:
            out.write(before + reason + "\n")
        os.replace(staged, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise
