"""Adapters to Google Cloud: Pub/Sub, Compute MIGs, Cloud Logging, Cloud Storage, identity tokens."""
