"""``python -m zen.console``: serve the console (``zen.console.serve``)."""

import sys

from zen.console.serve import main

if __name__ == "__main__":
    sys.exit(main())
