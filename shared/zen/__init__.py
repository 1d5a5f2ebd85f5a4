"""Zen: a multi-region GPU job scheduler for Google Cloud.

The package is the shared library behind the Cloud Functions (``functions/main.py``), the VM agent
and the local stand-ins. Only adapter modules import ``google.*`` or ``pg8000``.
"""

__version__ = "0.1.0"
