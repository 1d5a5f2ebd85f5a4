"""Calls injected around a job store's named operations (``StoreHooks``, run by ``hooked``): how a test makes a race
or an error happen at an exact point, in the in-memory store (``zen_dev.fakes.jobstore``) or in the Postgres adapter
(``zen.store.jobstore``), without patching modules. The port they hook: ``zen.jobs.store``."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

Hook = Callable[..., None]
_Method = TypeVar("_Method", bound=Callable[..., Any])


class StoreHooks:
    """Calls injected around a store's named operations (the ``JobTx`` method names, and
    ``submit_jobs`` for one group-commit statement): how a test makes a race or an error happen at an
    exact point, in the in-memory fake or in the Postgres adapter, without patching modules.

    ``before(op, call)``: ``call(*args, **kwargs)`` runs before each ``op``; ``after(op, call)``:
    ``call(result, *args, **kwargs)`` after it; ``fail_next(op, error)``: the next ``op`` raises ``error``
    (once) instead of running. A store without hooks pays one attribute test per call."""

    def __init__(self) -> None:
        self._before: dict[str, list[Hook]] = {}
        self._after: dict[str, list[Hook]] = {}
        self._errors: dict[str, list[BaseException]] = {}
        self._lock = threading.Lock()
        self.active = False

    def before(self, operation: str, call: Hook) -> None:
        with self._lock:
            self._before.setdefault(operation, []).append(call)
            self.active = True

    def after(self, operation: str, call: Hook) -> None:
        with self._lock:
            self._after.setdefault(operation, []).append(call)
            self.active = True

    def fail_next(self, operation: str, error: BaseException) -> None:
        with self._lock:
            self._errors.setdefault(operation, []).append(error)
            self.active = True

    def clear(self) -> None:
        with self._lock:
            for calls in (self._before, self._after, self._errors):
                calls.clear()
            self.active = False

    def run_before(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        with self._lock:
            error = errors.pop(0) if (errors := self._errors.get(operation)) else None
            calls = list(self._before.get(operation, ()))
        if error is not None:
            raise error
        for call in calls:
            call(*args, **kwargs)

    def run_after(self, operation: str, result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        with self._lock:
            calls = list(self._after.get(operation, ()))
        for call in calls:
            call(result, *args, **kwargs)


def hooked(operation: str) -> Callable[[_Method], _Method]:
    """Runs a store's ``hooks`` (an attribute of the object the method is on) around the method."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            hooks: StoreHooks = self.hooks
            if not hooks.active:
                return method(self, *args, **kwargs)
            hooks.run_before(operation, args, kwargs)
            result = method(self, *args, **kwargs)
            hooks.run_after(operation, result, args, kwargs)
            return result

        return call  # type: ignore[return-value]

    return wrap
