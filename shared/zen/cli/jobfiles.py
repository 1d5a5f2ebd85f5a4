"""Job files as ``zen submit`` reads them: YAML or JSON by the name's suffix (any case), a parse error said as its
problem and where, and the fields flags lay theirs over checked to be mappings; and which of a request's fields make
it too large to send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from zen.cli.kit import CliError
from zen.core.documents import load_json, load_yaml

JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")
_MAPPINGS = ("env", "labels", "secrets", "array", "checkpoint")  # a job file's fields that flags lay fields over


def is_job_file(word: str) -> bool:
    return word.lower().endswith(JOB_FILE_SUFFIXES)


def read_file(path: str, flag: str = ""):
    """A YAML or JSON file's content (``flag``: the option that named it, for the error)."""
    try:
        text = Path(path).read_text()
        return load_json(text) if path.lower().endswith(".json") else load_yaml(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CliError(f"{flag}{path}: cannot read it as {'JSON' if path.lower().endswith('.json') else 'YAML'}: "
                       f"{_parse_error(exc)}", 2) from None


def _parse_error(exc: Exception) -> str:
    """The parser's words a person can act on: YAML's problem and where (its first line is only its context,
    "while scanning for the next token"), else the first line of the error."""
    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem and mark is not None:
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__


def read_job_file(path: str) -> dict:
    data = read_file(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of job fields (cluster, command, ...)", 2)
    if bad := next((k for k in _MAPPINGS if not isinstance(data.get(k) or {}, dict)), None):  # flags add to these
        raise CliError(f"{path}: {bad} must be a mapping (KEY: VALUE lines under it), not {str(data[bad])[:40]}", 2)
    return data


def file_and_command(args) -> tuple[str | None, list[str]]:
    """``zen submit``'s words: its job file (the first word, when it names one) and its command (the other words
    before ``--`` and those after it); ``CliError`` (usage) for a folder, a job file that does not exist, a command
    given as one word with spaces, or ``--after-any`` given a job id: it is a switch, so the id was taken as the
    start of the command (``--after-any train -- python eval.py`` ran ``train python eval.py``) and the jobs to
    wait for are ``--after``'s. Words before ``--`` whose rest after it begins with a flag (``python eval.py --
    --lr 1``) are one command, the switch given no id."""
    positional, trailing, file = list(args.words), list(getattr(args, "trailing", [])), None
    if positional and "/" in positional[0] and Path(positional[0]).is_dir():  # a path to a folder here: no program
        raise CliError(f"{positional[0]} is a directory, not a job file (a job file ends in .yaml, .yml or .json) nor "
                       "a program (a command goes after --: zen submit --cluster C -- PROGRAM ARGS)", 2)
    if positional and is_job_file(positional[0]):
        if not Path(positional[0]).is_file():
            raise CliError(f"job file {positional[0]} does not exist (a command goes after --: "
                           "zen submit --cluster C -- PROGRAM ARGS)", 2)
        file = positional.pop(0)
    if getattr(args, "after_any", False) and positional and trailing and not trailing[0].startswith("-"):
        raise CliError(f"--after-any takes no job id ({positional[0]} would start the command): name the jobs with "
                       f"--after, then add the switch: zen submit --after {positional[0]} --after-any ... -- "
                       f"{' '.join(trailing)}", 2)
    if getattr(args, "after_any", False) and not getattr(args, "after", None) and file is None:  # (a file's after:)
        raise CliError("--after-any needs the jobs to wait for: zen submit --after ID --after-any ... -- COMMAND "
                       "(it starts once they ended, however)", 2)
    words = positional + trailing
    if len(words) == 1 and " " in words[0].strip():
        parts = words[0].split()
        raise CliError(f"the command {words[0]!r} is one word with spaces, and no program is called that: "
                       f"give the words separately (-- {' '.join(parts)}), or -- sh -c {words[0]!r}", 2)
    return file, words


def heaviest(request: Any) -> str:
    """What to do about a request over ``limits.max_message_bytes``: its heaviest fields (a tenth of it or more), each
    with its bytes in the message, and where large values go instead (the refusal says only the payload's size)."""
    sizes = {field: len(json.dumps(value, separators=(",", ":")).encode())
             for field, value in request.model_dump(mode="json", exclude_none=True).items()}
    fields = sorted(sizes, key=lambda field: -sizes[field])
    heavy = [f"{field} {sizes[field]} bytes" for field in fields if sizes[field] * 10 >= sum(sizes.values())][:3]
    return (f"limits.max_message_bytes; the heaviest: {', '.join(heavy or fields[:1])}: make it smaller, and give "
            "large data as inputs (gs:// objects staged into ZEN_INPUT_DIR) or in the image")
