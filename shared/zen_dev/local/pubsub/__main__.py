"""``python -m zen_dev.local.pubsub [--host H] [--port N]``: run the Pub/Sub stand-in."""

from .server import main

raise SystemExit(main())
