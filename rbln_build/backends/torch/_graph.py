"""Refuse a ``.pt2`` graph whose strings torch would evaluate as Python while loading or running it.

torch 2.13's ``torch.export.load`` reads the graph as JSON, but three kinds of string in it become
code:

* every ``expr_str`` (a symbolic size, stride, offset or sym value) goes to ``sympy.sympify``,
  which evaluates Python;
* ``guards_code`` is pasted into a generated function that ``ExportedProgram.module()`` ``exec``s;
* a node's ``target`` is resolved by attribute lookup from ``torch``, ``_operator`` or ``math``
  (``torch.os.system`` resolves), and any callable it finds is called when the graph runs.

So before a program is loaded, every JSON document of the archive is walked and these strings are
accepted only in the forms torch writes for our programs, checked with ``ast`` (nothing evaluated):

* ``expr_str``: sympy's ``srepr`` of integer arithmetic over size symbols: ``Symbol('s32',
  integer=True, positive=True)``, ``Integer(n)``, ``Rational(p, q)``, ``Add``/``Mul``/``Min``/``Max``/
  ``FloorDiv``/``Mod``/``CeilDiv``/... of those, comparisons and ``And``/``Or``/``Not``, ``Pow`` with a
  small integer exponent; symbol names like ``s0``/``u3``; integers below 2**63;
* ``guards_code``: comparisons of integer arithmetic over ``L['<input>'].size()[i]`` (optionally
  ``L['<input>'][j].size()[i]``), ``.stride()[i]`` and ``.storage_offset()``;
* ``target``: ``torch.ops.aten.<op>.<overload>`` and the symbolic integer operators
  (``_operator.mul``, ``torch.sym_max``, ...);
* graph inputs: tensors and symbolic ints only (a string input would be pasted into a guard).

Anything else raises ``IntegrityError`` with one line naming the entry and the offending string.
This module needs no torch: ``ast`` and ``json``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import IntegrityError

__all__ = ["check_graph_json", "check_sym_expr", "check_guard", "check_target"]

MAX_EXPR_CHARS = 20_000  # far above what torch writes (the longest in our programs is ~120)
MAX_NODES = 2_000  # ast nodes per expression or guard
MAX_INT = 2**63  # integers in expressions and guards, by magnitude
MAX_POW = 64
MAX_DEPTH = 200  # JSON nesting (torch's graphs are ~10 deep)

# Every name sympy or torch's sympy functions give a form torch prints for integer shapes (srepr).
_SYM_FUNCS = frozenset(
    {
        "Add",
        "Mul",
        "Min",
        "Max",
        "FloorDiv",
        "CeilDiv",
        "CleanDiv",
        "Mod",
        "PythonMod",
        "ModularIndexing",
        "IntTrueDiv",
        "Equality",
        "Unequality",
        "LessThan",
        "StrictLessThan",
        "GreaterThan",
        "StrictGreaterThan",
        "Eq",
        "Ne",
        "Lt",
        "Le",
        "Gt",
        "Ge",
        "And",
        "Or",
        "Not",
    }
)
_SYM_CONSTS = frozenset({"true", "false"})
_SYMBOL_NAME = re.compile(r"[a-z]{1,4}[0-9]{1,9}")
_SYMBOL_FLAGS = frozenset({"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite"})
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
_TENSOR_METHODS = {"size": 1, "stride": 1, "storage_offset": 0}  # -> how many subscripts follow (0: none)
_GUARD_FUNCS = frozenset({"Max", "Min", "max", "min"})

_ATEN = re.compile(r"torch\.ops\.aten\._?[a-z][a-z0-9_]{0,100}\.[A-Za-z][A-Za-z0-9_]{0,60}")
_SYM_TARGETS = frozenset(
    {f"_operator.{op}" for op in ("getitem", "add", "sub", "mul", "floordiv", "mod", "neg", "pos", "truediv")}
    | {f"_operator.{op}" for op in ("eq", "ne", "le", "lt", "ge", "gt", "and_", "or_")}
    | {f"torch.sym_{op}" for op in ("max", "min", "not", "int", "float", "ite", "sqrt")}
    | {"math.trunc"}
)
_ALLOWED_INPUTS = frozenset({"as_tensor", "as_sym_int"})


class _Refused(ValueError):
    pass


def _int_constant(node: ast.AST) -> int:
    """An integer literal, possibly negated; bounded."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int_constant(node.operand)
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < MAX_INT:
        return node.value
    raise _Refused(f"expected an integer below 2**63, got {ast.dump(node)[:80]}")


def _parse(text: object, what: str) -> ast.expr:
    if not isinstance(text, str):
        raise _Refused(f"{what} must be a string, got {type(text).__name__}")
    if len(text) > MAX_EXPR_CHARS:
        raise _Refused(f"{what} of {len(text)} characters (at most {MAX_EXPR_CHARS})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Refused(f"{what} is not an expression ({type(exc).__name__})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise _Refused(f"{what} has more than {MAX_NODES} parts")
    return tree.body


def _sym(node: ast.expr) -> None:
    if isinstance(node, ast.Name) and node.id in _SYM_CONSTS:
        return
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise _Refused(f"{type(node).__name__} is not a sympy constructor call")
    name, args, kws = node.func.id, node.args, node.keywords
    if name == "Symbol":
        if len(args) != 1 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
            raise _Refused("Symbol takes one name")
        if not _SYMBOL_NAME.fullmatch(args[0].value):
            raise _Refused(f"symbol name {args[0].value!r} is not a size symbol like s0 or u3")
        for kw in kws:
            if (
                kw.arg not in _SYMBOL_FLAGS
                or not isinstance(kw.value, ast.Constant)
                or type(kw.value.value) is not bool
            ):
                raise _Refused(f"Symbol flag {kw.arg!r} is not an assumption torch writes")
        return
    if kws:
        raise _Refused(f"{name} with keyword arguments")
    if name == "Integer":
        if len(args) != 1:
            raise _Refused("Integer takes one integer")
        _int_constant(args[0])
        return
    if name == "Rational":
        if len(args) != 2 or _int_constant(args[1]) == 0:
            raise _Refused("Rational takes two integers, the second not zero")
        _int_constant(args[0])
        return
    if name == "Pow":
        if len(args) != 2:
            raise _Refused("Pow takes a base and an exponent")
        exponent = args[1]
        if not (
            isinstance(exponent, ast.Call) and isinstance(exponent.func, ast.Name) and exponent.func.id == "Integer"
        ):
            raise _Refused("Pow with an exponent that is not an Integer")
        _sym(exponent)
        if not 0 <= _int_constant(exponent.args[0]) <= MAX_POW:
            raise _Refused(f"Pow with an exponent outside 0..{MAX_POW}")
        _sym(args[0])
        return
    if name not in _SYM_FUNCS:
        raise _Refused(f"{name!r} is not an integer-arithmetic function torch writes")
    if not args:
        raise _Refused(f"{name} without arguments")
    for arg in args:
        _sym(arg)


def check_sym_expr(text: object) -> None:
    """Raise ValueError unless ``text`` is the srepr of integer arithmetic over size symbols."""
    _sym(_parse(text, "expression"))


def _source(node: ast.expr) -> None:
    """``L['name']`` or ``L['name'][j]``: an input of the program."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript):
        _int_constant(node.slice)
        node = node.value
    if not (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "L"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
        and _INPUT_NAME.fullmatch(node.slice.value)
    ):
        raise _Refused("a guard reads something other than L['<input>'] or L['<input>'][i]")


def _tensor_property(node: ast.expr) -> bool:
    """``<source>.size()[i]``, ``<source>.stride()[i]`` or ``<source>.storage_offset()``."""
    call = node.value if isinstance(node, ast.Subscript) else node
    if not (
        isinstance(call, ast.Call)
        and not call.args
        and not call.keywords
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in _TENSOR_METHODS
    ):
        return False
    if (_TENSOR_METHODS[call.func.attr] == 1) != isinstance(node, ast.Subscript):
        return False
    if isinstance(node, ast.Subscript):
        _int_constant(node.slice)
    _source(call.func.value)
    return True


def _guard(node: ast.expr) -> None:
    if isinstance(node, ast.Compare):
        if not all(isinstance(op, (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            raise _Refused("a comparison other than == != < <= > >=")
        for part in (node.left, *node.comparators):
            _guard(part)
    elif isinstance(node, ast.BoolOp):
        for part in node.values:
            _guard(part)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        _guard(node.operand)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            raise _Refused(f"the operator {type(node.op).__name__}")
        _guard(node.left)
        _guard(node.right)
    elif isinstance(node, ast.Constant):
        _int_constant(node)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _GUARD_FUNCS:
        if node.keywords or not node.args:
            raise _Refused(f"{node.func.id} with keywords or without arguments")
        for arg in node.args:
            _guard(arg)
    elif not _tensor_property(node):
        raise _Refused(f"{type(node).__name__} is not integer arithmetic over input sizes")


def check_guard(text: object) -> None:
    """Raise ValueError unless ``text`` compares integer arithmetic over the inputs' sizes."""
    _guard(_parse(text, "guard"))


def check_target(target: object) -> None:
    """Raise ValueError unless ``target`` names an aten operator or a symbolic integer operator."""
    if not isinstance(target, str) or not (_ATEN.fullmatch(target) or target in _SYM_TARGETS):
        raise _Refused(f"node target {str(target)[:120]!r} is not an aten operator")


def _walk(value: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object in ``value`` with its path, iteratively (no recursion on hostile depth)."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels at {path or '/'}")
        if isinstance(item, dict):
            yield path, item
            stack.extend((f"{path}/{k}", v, depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in enumerate(item))


def _check_document(doc: Any, is_model: bool) -> None:
    for path, obj in _walk(doc):
        where = path or "/"
        try:
            if "expr_str" in obj:
                check_sym_expr(obj["expr_str"])
            if is_model and "target" in obj:  # a graph node (the only object of the schema with a target)
                check_target(obj["target"])
            if is_model and "source_fn_stack" in obj and isinstance(obj["source_fn_stack"], str):
                for item in obj["source_fn_stack"].split(";"):
                    check_target(item.rsplit(",", 1)[-1])
            if is_model and "nodes" in obj and "inputs" in obj and isinstance(obj["inputs"], list):  # a graph
                for arg in obj["inputs"]:
                    kinds = set(arg) if isinstance(arg, dict) else {type(arg).__name__}
                    if not kinds <= _ALLOWED_INPUTS:
                        raise _Refused(f"a graph input of kind {sorted(kinds)[:2]} (only tensors and sym ints)")
        except _Refused as exc:
            raise _Refused(f"{exc} (at {where[:160]})") from None
    if is_model:
        guards = doc.get("guards_code", []) if isinstance(doc, dict) else []
        if not isinstance(guards, list):
            raise _Refused("guards_code is not a list")
        for i, guard in enumerate(guards):
            try:
                check_guard(guard)
            except _Refused as exc:
                raise _Refused(f"{exc} (guards_code[{i}]: {str(guard)[:120]!r})") from None


def check_graph_json(data: bytes, name: str, where: Path, is_model: bool = True) -> None:
    """Raise IntegrityError unless the JSON document ``name`` of the archive holds only strings in
    the forms above (``is_model``: a graph, ``models/<name>.json``; else a weights/constants config)."""
    try:
        doc = json.loads(data)
        _check_document(doc, is_model)
    except (ValueError, RecursionError, MemoryError) as exc:
        what = str(exc) if isinstance(exc, _Refused) else f"unreadable JSON ({type(exc).__name__})"
        raise IntegrityError(
            f"{where}: {name}: {what}; torch would evaluate it as Python code while loading the program. "
            "Refusing to load it (rbln-build never writes such a graph): rebuild the cell from a trusted build."
        ) from None
