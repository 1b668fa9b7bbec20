"""Bounds on what a client or a model can ask for: documents to parse and limits to run with.

    data = load_yaml(text, what="plan.yaml")    # size, depth and alias expansion bounded
    check_depth(data, field="plan")              # nested at most MAX_JSON_DEPTH levels
    raw_json_too_deep(body)                      # the same on raw bytes, before parsing
    check_limit_caps(limits, settings.sandbox)   # every limit within the operator's caps
    check_plan_caps(plan, settings.sandbox)      # the same for every step of a plan

Everything here is pure and linear in the size of its input. A refusal is a
:class:`~onebox.errors.ValidationError` (or :class:`~onebox.errors.PolicyViolation`
for a limit) naming the field, the bound and how to fix it; the API maps both to a 4xx.

Why an alias bound: a YAML document of a few hundred bytes can alias a list of
aliases nine levels deep ("billion laughs"). PyYAML shares the constructed objects,
so parsing is quick, but every consumer that walks the result (validation, JSON
encoding, hashing) pays for the expanded tree. The loader measures that expanded
size on the composed node graph (memoised, so linear) and refuses it past a bound
before anything is constructed.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from itertools import accumulate, repeat
from typing import Any

import yaml

from onebox.errors import ValidationError

MAX_YAML_BYTES = 1 << 20
MAX_YAML_NODES = 200_000
MAX_JSON_DEPTH = 64
MAX_READ_BYTES = 4 << 20  # the most one knowledge_read returns (4 MiB)
DEFAULT_READ_BYTES = 1 << 20  # what it returns when the step gives no max_bytes
MAX_DOCUMENTS_BYTES = 16 << 20  # the most a code step's ``documents`` write, all together

#: (request limit, SandboxSettings cap) pairs
LIMIT_CAPS: tuple[tuple[str, str], ...] = (
    ("timeout_s", "max_timeout_s"), ("memory_mb", "max_memory_mb"), ("cpus", "max_cpus"),
    ("pids", "max_pids"), ("disk_mb", "max_disk_mb"), ("max_output_bytes", "max_output_bytes_cap"),
)


class _BoundedSafeLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting deeper than ``max_depth`` as it goes."""

    max_depth = MAX_JSON_DEPTH
    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        if self.depth > self.max_depth + 1:  # the innermost scalar is not a level
            raise ValidationError(f"the document is nested deeper than {self.max_depth} levels")
        try:
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self.depth -= 1


def load_yaml(text: str, *, what: str = "the document", max_bytes: int = MAX_YAML_BYTES,
              max_nodes: int = MAX_YAML_NODES) -> Any:
    """Safe YAML with bounds on size, depth and expanded node count; ValidationError past one."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ValidationError(f"{what} is {size} bytes; the limit is {max_bytes} bytes")
    loader = _BoundedSafeLoader(text)
    try:
        node = loader.get_single_node()  # type: ignore[no-untyped-call]
        if node is None:
            return None
        _expanded_size(node, max_nodes)
        return loader.construct_document(node)  # type: ignore[no-untyped-call]
    except ValidationError as exc:
        raise ValidationError(f"{what}: {exc.message}") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def _expanded_size(root: yaml.Node, max_nodes: int, max_depth: int = MAX_JSON_DEPTH) -> int:
    """Nodes of the tree the graph stands for (each alias counted in full); memoised, linear.

    The tree's depth is bounded too: aliases nested in aliases can build a tree much
    deeper than any single stretch of the text.
    """
    seen: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, height)
    active: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if depth > max_depth:
            raise ValidationError(f"the document is nested deeper than {max_depth} levels")
        if key in active:
            raise ValidationError("an alias refers to a node that contains it (recursive anchor)")
        total, height = seen.get(key) or _measure_children(node, depth, measure, active)
        if depth + height > max_depth:
            raise ValidationError(f"the document is nested deeper than {max_depth} levels")
        if total > max_nodes:
            raise ValidationError(f"aliases expand to more than {max_nodes} nodes; write the "
                                  "values out or use fewer aliases")
        seen[key] = (total, height)
        return total, height

    return measure(root, 0)[0]


def _measure_children(node: yaml.Node, depth: int, measure: Any, active: set[int]
                      ) -> tuple[int, int]:
    active.add(id(node))
    total, height = 1, 0
    for child in _children(node):
        size, child_height = measure(child, depth + 1)
        total, height = total + size, max(height, child_height)
    active.discard(id(node))
    return total, 0 if isinstance(node, yaml.ScalarNode) else height + 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def json_depth(value: Any, stop_at: int = MAX_JSON_DEPTH + 1) -> int:
    """Nesting depth of plain data (a scalar is 0), counted without recursion, up to ``stop_at``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest >= stop_at:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: Any, *, field: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    if json_depth(value, max_depth + 1) > max_depth:
        raise ValidationError(f"{field} is nested deeper than {max_depth} levels; flatten it",
                              field=field)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # minus one: +1 / -1


def raw_json_too_deep(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests deeper than ``max_depth``, judged without parsing it."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    skeleton = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS).translate(_STEP)
    return max(accumulate(map(operator.sub, skeleton, repeat(1))), default=0) > max_depth
