"""The end-to-end tests' shared fixture: a short-named home for a local stack (tests.stack_support)."""

from tests.stack_support import home  # noqa: F401  (the fixture)
