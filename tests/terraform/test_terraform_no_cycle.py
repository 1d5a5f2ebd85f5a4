"""Terraform refuses a plan whose resources, data sources and locals reference one another in a ring ("Error: Cycle"),
before it creates anything. The console's was one: its function's ZEN_CONSOLE_IAP_AUDIENCE names the backend service
(local.console_audience: its generated id), whose backend is the serverless network endpoint group, which named the
function (``google_cloudfunctions2_function.console[0].name``): with console_domain set, no plan could be made, and
nothing deployed. Read from the real terraform/ files: each object's references in its expressions (``${...}``,
``depends_on`` included), and no ring among them."""

from __future__ import annotations

import re
from typing import Iterator

from tests.terraform.hcl import Module, strings

Node = tuple[str, ...]
_REF = re.compile(r"(?<![\w.-])(?:data\.([a-z0-9_]+)\.([A-Za-z_][\w-]*)|local\.([A-Za-z_][\w-]*)"
                  r"|((?:google|terraform)_[a-z0-9_]+)\.([A-Za-z_][\w-]*))")


def _expressions(text: str) -> Iterator[str]:
    """The ``${...}`` parts of a parsed string (its literal text names nothing terraform follows)."""
    start = text.find("${")
    while start != -1:
        depth, end = 0, start + 1
        while end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        yield text[start:end + 1]
        start = text.find("${", end)


def _references(body: object) -> set[Node]:
    found: set[Node] = set()
    for text in strings(body):
        for expression in _expressions(text):
            for match in _REF.finditer(expression):
                data_type, data_name, local, rtype, name = match.groups()
                found.add(("data", data_type, data_name) if data_type else ("local", local) if local else (rtype, name))
    return found


def dependency_graph(module: Module) -> dict[Node, set[Node]]:
    """Each resource, data source and local -> the others its expressions reference."""
    bodies: dict[Node, object] = {**module.resources, **{("data", *key): body for key, body in module.data.items()},
                                  **{("local", name): body for name, body in module.locals.items()}}
    return {node: {ref for ref in _references(body) if ref in bodies and ref != node} for node, body in bodies.items()}


def rings(graph: dict[Node, set[Node]]) -> list[list[Node]]:
    """The rings a depth-first walk meets (none: terraform can order every object)."""
    state: dict[Node, int] = {}  # 1: on the walk's path, 2: done
    path: list[Node] = []
    found: list[list[Node]] = []

    def walk(node: Node) -> None:
        state[node] = 1
        path.append(node)
        for next_node in sorted(graph[node]):
            if state.get(next_node) == 1:
                found.append(path[path.index(next_node):] + [next_node])
            elif next_node not in state:
                walk(next_node)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def test_the_graph_reader_sees_a_ring():
    graph = {("a", "x"): {("local", "y")}, ("local", "y"): {("b", "z")}, ("b", "z"): {("a", "x")}}
    assert rings(graph) == [[("a", "x"), ("local", "y"), ("b", "z"), ("a", "x")]]
    assert _references({"e": ["/p/${data.google_project.this.number}/s/${google_x.y[0].id}", "local.z in prose"]}) == {
        ("data", "google_project", "this"), ("google_x", "y")}


def test_no_terraform_object_depends_on_itself_through_others():
    graph = dependency_graph(Module.load())
    assert ("google_cloudfunctions2_function", "console") in graph  # the module as read, its console included
    found = [" -> ".join(".".join(node) for node in ring) for ring in rings(graph)]
    assert found == [], f"terraform would refuse the plan (Error: Cycle): {found}"
