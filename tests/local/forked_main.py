"""A module ``tests/local/test_warm_forks_module.py`` runs as ``python -m tests.local.forked_main`` and forked."""

import atexit
import os
import sys
import threading
import time

if __name__ == "__main__":
    def later() -> None:
        time.sleep(0.2)
        print("a thread joined before the end", os.path.basename(sys.argv[0]), sys.argv[1:], flush=True)

    threading.Thread(target=later).start()
    atexit.register(lambda: print("an exit handler ran", sys.modules["__main__"].__spec__.name, flush=True))
    print(__name__, sys.argv[1:], os.environ.get("FORKED_SAYS"), os.getcwd(), os.getsid(0) == os.getpid(),
          sys.stdin.read() == "", type(sys.stdout.buffer).__name__, sys.stdout.write_through, sys.stderr.line_buffering,
          time.tzname[0])
    print("to stderr", file=sys.stderr)
    sys.exit(3)
