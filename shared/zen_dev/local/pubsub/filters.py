"""Pub/Sub subscription filter language: parser and evaluator (pure, no I/O). Errors raise
:class:`FilterError` (a ``ValueError``).

The syntax and its limits: docs/reference/simulator.md, "The Pub/Sub stand-in".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

MAX_FILTER_BYTES = 256

_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", '"': '"', "'": "'", "`": "`", "?": "?",
}


class FilterError(ValueError):
    """A filter that does not parse; the message says what and where."""


# --- syntax tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HasKey:
    key: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes


@dataclass(frozen=True)
class Equals:
    key: str
    value: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes and attributes[self.key] == self.value


@dataclass(frozen=True)
class NotEquals:
    key: str
    value: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return not (self.key in attributes and attributes[self.key] == self.value)


@dataclass(frozen=True)
class HasPrefix:
    key: str
    prefix: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes and attributes[self.key].startswith(self.prefix)


@dataclass(frozen=True)
class Not:
    operand: "Node"

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return not self.operand.matches(attributes)


@dataclass(frozen=True)
class And:
    operands: tuple["Node", ...]

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return all(op.matches(attributes) for op in self.operands)


@dataclass(frozen=True)
class Or:
    operands: tuple["Node", ...]

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return any(op.matches(attributes) for op in self.operands)


@dataclass(frozen=True)
class MatchAll:
    def matches(self, attributes: Mapping[str, str]) -> bool:
        return True


Node = Union[HasKey, Equals, NotEquals, HasPrefix, Not, And, Or, MatchAll]


# --- parser --------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # low-level helpers
    def error(self, what: str, pos: int | None = None) -> FilterError:
        at = self.pos if pos is None else pos
        return FilterError(f"Invalid filter: {what} at position {at} in {self.text!r}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)

    def word_at(self) -> str:
        """The identifier starting at the current position (without consuming it)."""
        end = self.pos
        while end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
            end += 1
        return self.text[self.pos:end]

    def expect(self, literal: str) -> None:
        self.skip_ws()
        if not self.text.startswith(literal, self.pos):
            found = self.peek() or "end of filter"
            raise self.error(f"expected {literal!r} but found {found!r}")
        self.pos += len(literal)

    # grammar
    def parse(self) -> Node:
        if self.at_end():
            return MatchAll()
        node = self.expression()
        if not self.at_end():
            raise self.error(f"unexpected {self.text[self.pos:]!r}")
        return node

    def expression(self) -> Node:
        operands = [self.unary()]
        operator = ""
        while True:
            self.skip_ws()
            word = self.word_at()
            if word not in ("AND", "OR"):
                if word.upper() in ("AND", "OR"):
                    raise self.error(f"boolean operators must be upper case, found {word!r}")
                break
            if operator and word != operator:
                raise self.error(
                    "AND and OR cannot be mixed without parentheses; group them, e.g. "
                    "'a AND (b OR c)'"
                )
            operator = word
            self.pos += len(word)
            operands.append(self.unary())
        if not operator:
            return operands[0]
        return And(tuple(operands)) if operator == "AND" else Or(tuple(operands))

    def unary(self) -> Node:
        self.skip_ws()
        if self.peek() == "-":
            self.pos += 1
            return Not(self.unary())
        word = self.word_at()
        if word == "NOT":
            self.pos += len(word)
            if self.peek() not in ("(", "-") and not self.peek().isspace():
                raise self.error("expected whitespace or '(' after NOT")
            return Not(self.unary())
        if word == "not":
            raise self.error("boolean operators must be upper case, found 'not'")
        return self.primary()

    def primary(self) -> Node:
        self.skip_ws()
        start = self.pos
        if self.peek() == "(":
            self.pos += 1
            node = self.expression()
            self.expect(")")
            return node
        word = self.word_at()
        if word == "hasPrefix":
            self.pos += len(word)
            self.expect("(")
            self.skip_ws()
            if self.word_at() != "attributes":
                raise self.error("hasPrefix takes attributes.KEY as its first argument")
            self.pos += len("attributes")
            self.expect(".")
            key = self.key()
            self.expect(",")
            prefix = self.string()
            self.expect(")")
            return HasPrefix(key, prefix)
        if word == "attributes":
            self.pos += len(word)
            self.skip_ws()
            if self.peek() == ":":
                self.pos += 1
                return HasKey(self.key())
            if self.peek() == ".":
                self.pos += 1
                key = self.key()
                self.skip_ws()
                if self.text.startswith("!=", self.pos):
                    self.pos += 2
                    return NotEquals(key, self.string())
                if self.peek() == "=":
                    self.pos += 1
                    return Equals(key, self.string())
                raise self.error(f"expected '=' or '!=' after attributes.{key}")
            raise self.error("expected ':' or '.' after 'attributes'")
        if not word:
            found = self.peek() or "end of filter"
            raise self.error(f"expected a condition but found {found!r}", start)
        raise self.error(
            f"unknown term {word!r}; only attributes.KEY, attributes:KEY and "
            "hasPrefix(attributes.KEY, \"prefix\") are supported",
            start,
        )

    def key(self) -> str:
        self.skip_ws()
        if self.peek() in ('"', "'"):
            key = self.string()
        else:
            end = self.pos
            while end < len(self.text) and self.text[end] in _KEY_CHARS:
                end += 1
            key = self.text[self.pos:end]
            self.pos = end
        if not key:
            raise self.error("expected an attribute key")
        return key

    def string(self) -> str:
        self.skip_ws()
        quote = self.peek()
        if quote not in ('"', "'"):
            found = self.peek() or "end of filter"
            raise self.error(f"expected a string literal but found {found!r}")
        start = self.pos
        self.pos += 1
        out: list[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.error("unterminated string literal", start)
            ch = self.text[self.pos]
            if ch == quote:
                self.pos += 1
                return "".join(out)
            if ch == "\\":
                out.append(self.escape())
            else:
                out.append(ch)
                self.pos += 1

    def escape(self) -> str:
        start = self.pos
        self.pos += 1  # the backslash
        ch = self.peek()
        if not ch:
            raise self.error("unterminated escape sequence", start)
        if ch in _SIMPLE_ESCAPES:
            self.pos += 1
            return _SIMPLE_ESCAPES[ch]
        width = {"x": 2, "X": 2, "u": 4, "U": 8}.get(ch)
        if width is not None:
            digits = self.text[self.pos + 1:self.pos + 1 + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"\\{ch} needs {width} hex digits", start)
            self.pos += 1 + width
            return self._codepoint(int(digits, 16), start)
        if ch in "01234567":
            digits = self.text[self.pos:self.pos + 3]
            if len(digits) != 3 or any(d not in "01234567" for d in digits):
                raise self.error("octal escapes need 3 digits", start)
            self.pos += 3
            return self._codepoint(int(digits, 8), start)
        raise self.error(f"unknown escape sequence \\{ch}", start)

    def _codepoint(self, value: int, start: int) -> str:
        if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            raise self.error("escape is not a valid code point", start)
        return chr(value)


def parse_filter(text: str) -> Node:
    """Parse a filter expression into a tree with ``.matches(attributes) -> bool``."""
    if len(text.encode("utf-8")) > MAX_FILTER_BYTES:
        raise FilterError(
            f"Invalid filter: it is {len(text.encode('utf-8'))} bytes, "
            f"the maximum is {MAX_FILTER_BYTES}"
        )
    return _Parser(text).parse()


def matches(text: str, attributes: Mapping[str, str]) -> bool:
    """Convenience: parse ``text`` and evaluate it against ``attributes``."""
    return parse_filter(text).matches(attributes)
