"""Postgres persistence: connection and pool (``db``), migrations (``migrate``), rows (``repository``)."""
