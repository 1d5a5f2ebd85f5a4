"""Error types shared by the library.

``TransientError`` means "try again later": entry points let it propagate so Pub/Sub redelivers.
``Rejected`` means "this message can never succeed": it is recorded, announced and acked.
"""

import difflib
import types
import typing

from pydantic import BaseModel, ValidationError

from zen.core.text import escape_unstorable

# Fields where a credential may be given by mistake in a secret reference's place (a token, a webhook's URL): a
# value of the wrong type under them is not quoted, as ``zen.core.secrets.check_reference`` quotes no such value.
UNQUOTED_FIELDS = frozenset({"secrets", "notify"})


def describe_validation_error(exc: ValidationError, *, top: str = "(message)", limit: int = 2000,
                              model: type[BaseModel] | None = None, quote_text: bool = False) -> str:
    """One line a person can act on from a pydantic ValidationError: ``field.path: problem; ...``.
    What it quotes of the input (field names are the message's own keys) is escaped and bounded. Given
    the ``model``, an unknown field names the field of its own mapping it is closest to (``comand``: command;
    ``checkpoint.evry``: checkpoint.every). ``top``: what a problem of the whole message is said of ("" : nothing,
    as a command line's job, which has no name). ``quote_text``:
    a number, boolean or null where text is meant (a job file's ``VERSION: 1.10``) says what it was read as and to
    quote it, not pydantic's "Input should be a valid string"."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or top
        hint = ""
        known = _fields_at(model, err["loc"][:-1]) if err["type"] == "extra_forbidden" and err["loc"] else []
        if known:
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            hint = f" (did you mean {'.'.join([*map(str, err['loc'][:-1]), close[0]])}?)" if close else ""
        message = err["msg"]
        if err["type"] == "value_error":  # our validators' own words: without pydantic's "Value error, " and
            message = message.removeprefix("Value error, ")  # the field's name said again in front of them
            message = message.removeprefix(f"{where}: ").removeprefix(f"{err['loc'][-1]}: ") if err["loc"] else message
        if quote_text and err["type"] == "string_type" and (err.get("input") is None
                                                             or isinstance(err.get("input"), (int, float))):
            message = _not_text(err.get("input"), bool(UNQUOTED_FIELDS.intersection(str(p) for p in err["loc"])))
        elif err["type"].endswith(("_type", "_parsing")) and isinstance(err.get("input"), (str, int, float)) and (
                not UNQUOTED_FIELDS.intersection(str(p) for p in err["loc"])):
            # a value of the wrong type, quoted (bounded): "10m" for seconds says what to change
            unit = " of seconds" if str(err["loc"][-1] if err["loc"] else "").endswith("_s") else ""
            message = f"{message}{unit}, not {repr(err['input'])[:40]}"
        parts.append(f"{where}: {message}{hint}" if where else f"{message}{hint}")  # top "": the whole request's
    return escape_unstorable("; ".join(parts), limit)


def _fields_at(model: type[BaseModel] | None, path: tuple[int | str, ...]) -> list[str]:
    """The field names of the mapping at ``path`` within ``model`` (``("checkpoint",)``: CheckpointSpec's; a list's
    index goes into its items, a mapping's key into its values), or none where the path leads to no single model."""
    kinds: list[typing.Any] = [model] if model is not None else []
    for part in path:
        models = [kind for kind in _unwrapped(kinds) if isinstance(kind, type) and issubclass(kind, BaseModel)]
        if isinstance(part, int):
            lists = [kind for kind in _unwrapped(kinds) if typing.get_origin(kind) is list]
            kinds = [arg for kind in lists for arg in typing.get_args(kind)]
        elif len(models) == 1 and part in models[0].model_fields:
            kinds = [models[0].model_fields[part].annotation]
        else:  # a key of a mapping of models (a queue's name), else nothing to compare with
            kinds = [typing.get_args(kind)[1] for kind in _unwrapped(kinds) if typing.get_origin(kind) is dict]
    models = [kind for kind in _unwrapped(kinds) if isinstance(kind, type) and issubclass(kind, BaseModel)]
    return list(models[0].model_fields) if len(models) == 1 else []


def _unwrapped(kinds: list[typing.Any]) -> list[typing.Any]:
    """The types behind ``Annotated[...]`` and ``X | None``: what a value of one of ``kinds`` may be."""
    out: list[typing.Any] = []
    for kind in kinds:
        if typing.get_origin(kind) is typing.Annotated:
            out.extend(_unwrapped([typing.get_args(kind)[0]]))
        elif typing.get_origin(kind) in (typing.Union, types.UnionType):
            out.extend(_unwrapped([arg for arg in typing.get_args(kind) if arg is not type(None)]))
        else:
            out.append(kind)
    return out


def _not_text(value: object, unquoted: bool) -> str:
    """Text is meant, and YAML or JSON read a number, a boolean or null: what it was read as (``1.10`` is the number
    1.1, which the job would not see as written: it is refused, not turned into "1.1"), and to quote it."""
    kind = "null" if value is None else "the boolean" if isinstance(value, bool) else "the number"
    read = kind if value is None or unquoted else f"{kind} {repr(value).lower() if isinstance(value, bool) else value}"
    return f"text is meant, and this was read as {read}: write it in quotes, as it should reach the job"


class ZenError(Exception):
    """Base class for Zen's own errors."""


class TransientError(ZenError):
    """A dependency (database, Pub/Sub) failed in a way that a retry may fix."""


class Rejected(ZenError):
    """A message is invalid for good; ``reason`` says what a person should fix."""

    def __init__(self, reason: str, *, job_id: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id


class DataRejected(Rejected):
    """Postgres refused a message's data (SQLSTATE class 22/23): it will never succeed; reject it."""


class ConfigError(ZenError):
    """The configuration file is missing or invalid."""
