"""Zen reads YAML on libyaml's parser where PyYAML has it (``zen.core.documents``), and reads what libyaml
refuses again with PyYAML's own parser, so a document means what it meant and an error reads as it read.

Every document the repository ships (the configuration, the demo's, the examples' job files, the simulator's
scenarios) loads to the same value both ways; YAML 1.2's booleans hold on both; a key given twice is refused
with its line both ways; a syntax error keeps PyYAML's excerpt with its caret."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zen.core import documents
from zen.core.documents import DuplicateKey, load_yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*(ROOT / "shared").rglob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])


def by_pyyaml(text: str):
    return documents._load(documents._Loader(text))


def test_the_pinned_pyyaml_has_libyaml_and_zen_reads_with_it():
    assert yaml.__with_libyaml__ and documents._FastLoader is not None
    assert issubclass(documents._FastLoader, yaml.CSafeLoader)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_document_reads_the_same_both_ways(path):
    text = path.read_text()
    assert load_yaml(text) == by_pyyaml(text)


def test_yaml_1_2_booleans_and_other_scalars_read_the_same_both_ways():
    text = ("on: [FAILED]\noff: 1\nyes: no\nflag: true\nFlag: False\nn: ~\nx: .inf\nd: 2001-12-14\noct: 0o17\n"
            "big: 1_000\nf: 1.5e3\nbase: &b {a: 1}\nmerged: {<<: *b, c: 2}\n'quoted': 'on'\n")
    loaded = load_yaml(text)
    assert loaded == by_pyyaml(text)
    assert loaded["on"] == ["FAILED"] and loaded["yes"] == "no" and loaded["flag"] is True
    assert loaded["merged"] == {"a": 1, "c": 2}


def test_a_key_given_twice_is_named_with_its_line():
    with pytest.raises(DuplicateKey, match=r"line 3: jobs\.a is given twice"):
        load_yaml("jobs:\n  a: 1\n  a: 2\n")


def test_a_syntax_error_keeps_pyyamls_excerpt():
    with pytest.raises(yaml.YAMLError) as refused:
        load_yaml("command: [python, train.py\n")
    assert "expected ',' or ']'" in str(refused.value) and "^" in str(refused.value), str(refused.value)
