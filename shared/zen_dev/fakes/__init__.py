"""Fakes of Zen's ports for tests: an in-memory job store and a recording publisher."""
