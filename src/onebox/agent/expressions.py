"""A safe expression language for ``when``, ``until``, ``foreach`` and ``{{ }}`` templates.

Expressions are parsed with :mod:`ast` and evaluated by walking a whitelist of
node types; nothing is ever passed to ``eval``. Allowed: literals (str, number,
bool, None, lists, tuples, dicts), names (earlier step outputs, ``item``,
``index``, ``iteration``), attribute and subscript access on them (on a mapping,
``a.b`` is ``a["b"]``), comparisons (``== != < <= > >= in not in is is not``),
``and or not``, ``x if c else y``, arithmetic ``+ - * / // %`` on numbers, and
calls of a few pure functions: len, min, max, sum, abs, any, all, int, float,
str, bool, round, sorted, lower, upper, strip.

    evaluate("len(fetch.result.rows) > 0 and fetch.ok", {"fetch": {...}})

Cost is bounded, so an expression may be evaluated on the event loop: an expression
has at most 1,000 characters and is nested at most 32 levels, so it has a few hundred
nodes; each node costs at most one pass over the values it is given (step outputs,
already in memory). What could cost more is refused with an ExpressionError naming
the bound: ``round`` takes ndigits in [-100, 100]; a product of integers may have at
most 4,096 bits (no chain of ``*`` builds a giant number); ``sum`` adds numbers only
(``sum(lists, [])`` would be quadratic); ``*`` never repeats strings or lists.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_EXPRESSION_CHARS = 1000
MAX_EXPRESSION_DEPTH = 32
MAX_NDIGITS = 100
MAX_PRODUCT_BITS = 4096
TEMPLATE = re.compile(r"\{\{\s*(.+?)\s*\}\}")


class ExpressionError(ValueError):
    """An expression that is not allowed, does not parse, or fails on the given values."""


def _round(number: Any, ndigits: Any = None) -> Any:
    if ndigits is not None and (isinstance(ndigits, bool) or not isinstance(ndigits, int)
                                or not -MAX_NDIGITS <= ndigits <= MAX_NDIGITS):
        raise ExpressionError(f"round(): ndigits must be an integer in [-{MAX_NDIGITS}, "
                              f"{MAX_NDIGITS}], got {ndigits!r}")
    return round(number, ndigits)


def _sum(values: Any, start: Any = 0) -> Any:
    items = list(values)
    for item in (start, *items):
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise ExpressionError(f"sum() adds numbers only, got {type(item).__name__}")
    return sum(items, start)


def _multiply(left: Any, right: Any) -> Any:
    if isinstance(left, int) and isinstance(right, int):
        bits = left.bit_length() + right.bit_length()
        if bits > MAX_PRODUCT_BITS:
            raise ExpressionError(f"a product of integers may have at most {MAX_PRODUCT_BITS} "
                                  f"bits; this one would have about {bits}")
    return left * right


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len, "min": min, "max": max, "sum": _sum, "abs": abs, "any": any, "all": all,
    "int": int, "float": float, "str": str, "bool": bool, "round": _round, "sorted": sorted,
    "lower": lambda s: str(s).lower(), "upper": lambda s: str(s).upper(),
    "strip": lambda s: str(s).strip(),
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _multiply,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


def parse(expression: str) -> ast.expr:
    """Parse and check an expression; ExpressionError says what is not allowed."""
    if not isinstance(expression, str) or not expression.strip():
        raise ExpressionError("expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"invalid expression {expression!r}: {exc.msg}") from None
    for node in ast.walk(tree.body):
        _check_node(node)
    _check_depth(tree.body)
    return tree.body


def _check_depth(root: ast.expr) -> None:
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise ExpressionError(f"expression is nested deeper than {MAX_EXPRESSION_DEPTH} "
                                  "levels")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _check_node(node: ast.AST) -> None:
    allowed = (
        ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd, ast.Compare,
        ast.BinOp, ast.IfExp, ast.Constant, ast.Name, ast.Load, ast.Attribute, ast.Subscript,
        ast.Slice, ast.List, ast.Tuple, ast.Dict, ast.Call, *_COMPARE, *_ARITH,
    )
    if not isinstance(node, allowed):
        raise ExpressionError(f"{type(node).__name__} is not allowed in an expression")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise ExpressionError(f"attribute {node.attr!r} is not allowed (leading underscore)")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise ExpressionError("only these functions may be called: " + ", ".join(_FUNCTIONS))
        if node.keywords:
            raise ExpressionError("keyword arguments are not allowed in an expression")


def referenced_names(expression: str) -> set[str]:
    """The free names an expression reads (functions excluded)."""
    tree = parse(expression)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    """The value of ``expression`` with ``names`` bound; ExpressionError on any failure."""
    tree = parse(expression)
    try:
        return _eval(tree, names)
    except ExpressionError:
        raise
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        raise ExpressionError(f"{expression!r} failed: {exc}") from None


def render(template: str, names: Mapping[str, Any]) -> str:
    """Replace every ``{{ expr }}`` with its value (strings as is, anything else as JSON)."""

    def one(match: re.Match[str]) -> str:
        value = evaluate(match.group(1), names)
        return value if isinstance(value, str) else json.dumps(value, default=str)

    return TEMPLATE.sub(one, template)


def template_expressions(template: str) -> list[str]:
    return [m.group(1) for m in TEMPLATE.finditer(template)]


def _eval(node: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExpressionError(f"unknown name {node.id!r}; known: {', '.join(sorted(names))}")
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return _member(_eval(node.value, names), node.attr, ast.unparse(node.value))
    if isinstance(node, ast.Subscript):
        return _subscript(node, names)
    if isinstance(node, ast.BoolOp):
        return _boolop(node, names)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        if isinstance(node.op, ast.Not):
            return not value
        _number(value, node)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.Compare):
        return _compare(node, names)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names), _eval(node.right, names)
        _number(left, node)
        _number(right, node)
        return _ARITH[type(node.op)](left, right)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, names) else node.orelse, names)
    return _collection_or_call(node, names)


def _collection_or_call(node: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_eval(k, names) if k else None: _eval(v, names)
                for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _FUNCTIONS[node.func.id](*[_eval(a, names) for a in node.args])
    raise ExpressionError(f"{type(node).__name__} is not allowed in an expression")


def _member(value: Any, attr: str, where: str) -> Any:
    if isinstance(value, Mapping):
        if attr not in value:
            raise ExpressionError(f"{where} has no key {attr!r}; keys: {', '.join(map(str, value))}")
        return value[attr]
    raise ExpressionError(f"{where} is a {type(value).__name__}, not a mapping; cannot read .{attr}")


def _subscript(node: ast.Subscript, names: Mapping[str, Any]) -> Any:
    value = _eval(node.value, names)
    if isinstance(node.slice, ast.Slice):
        parts = [None if p is None else _eval(p, names)
                 for p in (node.slice.lower, node.slice.upper, node.slice.step)]
        return value[slice(*parts)]
    key = _eval(node.slice, names)
    try:
        return value[key]
    except (KeyError, IndexError):
        raise ExpressionError(f"{ast.unparse(node.value)}[{key!r}] does not exist") from None


def _boolop(node: ast.BoolOp, names: Mapping[str, Any]) -> Any:
    result: Any = None
    for operand in node.values:
        result = _eval(operand, names)
        if isinstance(node.op, ast.And) and not result:
            return result
        if isinstance(node.op, ast.Or) and result:
            return result
    return result


def _compare(node: ast.Compare, names: Mapping[str, Any]) -> bool:
    left = _eval(node.left, names)
    for op, comparator in zip(node.ops, node.comparators, strict=True):
        right = _eval(comparator, names)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True


def _number(value: Any, node: ast.AST) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpressionError(f"arithmetic needs numbers, got {type(value).__name__} "
                              f"in {ast.unparse(node)!r}")


def as_list(value: Any, expression: str) -> Sequence[Any]:
    """A foreach value must be a list (or tuple); anything else is an error naming the expression."""
    if isinstance(value, list | tuple):
        return value
    raise ExpressionError(f"foreach {expression!r} must give a list, got {type(value).__name__}")
