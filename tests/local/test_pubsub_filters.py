"""The Pub/Sub subscription filter parser and evaluator (pure; no server)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zen_dev.local.pubsub.filters import (
    And,
    Equals,
    FilterError,
    HasKey,
    HasPrefix,
    MatchAll,
    Not,
    NotEquals,
    Or,
    matches,
    parse_filter,
)

ATTRS = {"domain": "com", "region": "eu-west", "my-key": "x", "k_2": "", "weird key": "w"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ('attributes.domain = "com"', True),
        ('attributes.domain = "org"', False),
        ('attributes.missing = "com"', False),
        ('attributes.domain != "org"', True),
        ('attributes.domain != "com"', False),
        ('attributes.missing != "com"', True),  # != is NOT(=): true when the key is absent
        ("attributes:domain", True),
        ("attributes:missing", False),
        ("attributes:k_2", True),  # present with an empty value
        ('hasPrefix(attributes.region, "eu-")', True),
        ('hasPrefix(attributes.region, "us-")', False),
        ('hasPrefix(attributes.missing, "")', False),
        ('hasPrefix(attributes.k_2, "")', True),
        ('attributes:domain AND attributes.region = "eu-west"', True),
        ('attributes:domain AND attributes.region = "us"', False),
        ('attributes.domain = "org" OR attributes:region', True),
        ('attributes.domain = "org" OR attributes:nope OR attributes:nada', False),
        ("NOT attributes:domain", False),
        ("NOT attributes:missing", True),
        ("-attributes:domain", False),
        ("-attributes:missing", True),
        ("NOT NOT attributes:domain", True),
        ("NOT(attributes:missing)", True),
        ('attributes:domain AND (attributes.region = "us" OR attributes:my-key)', True),
        ('(attributes:a OR attributes:b) AND attributes:domain', False),
        ('attributes.my-key = "x"', True),  # bare keys may contain hyphens
        ('attributes."my-key" = "x"', True),
        ("attributes:'weird key'", True),
        ('attributes."weird key" = \'w\'', True),
        ('  attributes.domain   =   "com"  ', True),
        ('attributes.domain="com"', True),
        ("", True),
        ("   ", True),
    ],
)
def test_operators(text: str, expected: bool) -> None:
    assert matches(text, ATTRS) is expected


def test_escapes_in_string_literals() -> None:
    attrs = {"q": 'say "hi"\n', "u": "é€", "b": "a\\b"}
    assert matches(r'attributes.q = "say \"hi\"\n"', attrs)
    assert matches(r'attributes.u = "\u00e9\u20ac"', attrs)
    assert matches(r'attributes.u = "\xe9\u20AC"', attrs)
    assert matches(r'attributes.b = "a\\b"', attrs)
    assert matches(r'attributes.b = "a\134b"', attrs)  # octal escape


def test_parse_tree_shape() -> None:
    tree = parse_filter(
        'attributes:a AND NOT hasPrefix(attributes.b, "p") AND -attributes.c != "v"'
    )
    assert tree == And((HasKey("a"), Not(HasPrefix("b", "p")), Not(NotEquals("c", "v"))))
    assert parse_filter('attributes.a = "1" OR attributes.a = "2"') == Or(
        (Equals("a", "1"), Equals("a", "2"))
    )
    assert parse_filter("") == MatchAll()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('attributes:a AND attributes:b OR attributes:c', "cannot be mixed"),
        ('attributes:a OR attributes:b AND attributes:c', "cannot be mixed"),
        ("attributes:a and attributes:b", "upper case"),
        ("not attributes:a", "upper case"),
        ("attributes.a = unquoted", "string literal"),
        ('attributes.a == "x"', "string literal"),
        ('attributes.a < "x"', "expected '=' or '!='"),
        ("attributes", "expected ':' or '.'"),
        ('data = "x"', "unknown term 'data'"),
        ('hasprefix(attributes.a, "x")', "unknown term"),
        ('hasPrefix(a, "x")', "first argument"),
        ('hasPrefix(attributes.a "x")', "expected ','"),
        ('hasPrefix(attributes.a, "x"', "expected ')'"),
        ('(attributes:a', "expected ')'"),
        ('attributes:a)', "unexpected"),
        ('attributes.a = "open', "unterminated"),
        (r'attributes.a = "\q"', "unknown escape"),
        (r'attributes.a = "\x4"', "hex digits"),
        ("attributes:", "attribute key"),
        ('attributes. = "x"', "attribute key"),
        ("NOT", "expected whitespace or '('"),
        ("NOTattributes:a", "unknown term"),
        ("attributes:a AND", "expected a condition"),
        ("AND attributes:a", "unknown term 'AND'"),
        ('attributes:a attributes:b', "unexpected"),
        ('attributes.k = "' + "x" * 250 + '"', "maximum is 256"),
    ],
)
def test_invalid_filters_raise_with_a_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert fragment in str(info.value)
    assert str(info.value).startswith("Invalid filter")


def test_filter_error_is_a_value_error() -> None:
    assert issubclass(FilterError, ValueError)


# --- property: rendering a random tree and parsing it back evaluates the same ------------------

KEYS = st.sampled_from(["a", "b", "my-key", "sp ace", 'q"uote'])
VALUES = st.text(alphabet='ab"\\\n é', max_size=4)


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _key(key: str) -> str:
    return key if all(c.isalnum() or c in "-_" for c in key) else _quote(key)


leaves = st.one_of(
    st.builds(lambda k: (f"attributes:{_key(k)}", lambda a: k in a), KEYS),
    st.builds(
        lambda k, v: (f"attributes.{_key(k)} = {_quote(v)}", lambda a: a.get(k) == v), KEYS, VALUES
    ),
    st.builds(
        lambda k, v: (f"attributes.{_key(k)} != {_quote(v)}", lambda a: a.get(k) != v), KEYS, VALUES
    ),
    st.builds(
        lambda k, v: (
            f"hasPrefix(attributes.{_key(k)}, {_quote(v)})",
            lambda a: k in a and a[k].startswith(v),
        ),
        KEYS,
        VALUES,
    ),
)


def _combine(children):
    def negate(child):
        text, fn = child
        return (f"NOT ({text})", lambda a: not fn(a))

    def join(op, parts):
        text = f" {op} ".join(f"({t})" for t, _ in parts)
        fns = [f for _, f in parts]
        if op == "AND":
            return (text, lambda a: all(f(a) for f in fns))
        return (text, lambda a: any(f(a) for f in fns))

    return st.one_of(
        children.map(negate),
        st.lists(children, min_size=2, max_size=3).map(lambda p: join("AND", p)),
        st.lists(children, min_size=2, max_size=3).map(lambda p: join("OR", p)),
    )


expressions = st.recursive(leaves, _combine, max_leaves=6)
attribute_maps = st.dictionaries(KEYS, VALUES, max_size=5)


@settings(max_examples=200, deadline=None)
@given(expressions, attribute_maps)
def test_rendered_expressions_evaluate_like_their_meaning(expr, attributes) -> None:
    text, meaning = expr
    if len(text.encode()) > 256:
        with pytest.raises(FilterError):
            parse_filter(text)
        return
    assert parse_filter(text).matches(attributes) is meaning(attributes)
