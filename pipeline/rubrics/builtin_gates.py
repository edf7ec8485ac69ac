"""Deterministic built-in gates over the Python source a row proposes (seed 000).

Seed 000: "Deterministic validators SHOULD be preferred" and "Cyclomatic complexity is
analyzer-dependent. Publish the analyzer version, scope, counting conventions, and
threshold with the rubric." The analyzer is the running interpreter's :mod:`ast`
(its version is recorded in the manifest); each distinct source text is parsed once and
all three built-ins read that one parse.

``syntax_valid``
    ``ast.parse(source)`` succeeds (a whole module; no fence or prose stripping).
``max_cyclomatic_complexity_per_function`` (convention ``rowgate-mccabe/1``)
    For every ``def``/``async def`` (methods and nested functions each count on their
    own, never added to their parent): 1 plus one per decision point in its body:
    ``if``/``elif``, conditional expression, ``for``/``async for``, ``while``, each
    ``except`` handler, each ``case`` of a ``match`` except an unguarded ``case _``,
    each comprehension ``for`` and each of its ``if`` clauses, and each extra operand
    of a boolean operator (``a and b or c`` adds 2). ``else``/``finally``/``with``/
    ``assert``/``break`` add nothing. Lambdas count toward the enclosing function;
    module- and class-level statements belong to no function. The gate's evidence is the
    maximum over functions, 0 for source without functions.
``unapproved_dependencies``
    True when a static import names a top-level module outside the allow-list (the
    campaign's ``allowed_imports``, plus the interpreter's standard library when
    ``allow_stdlib``). Relative imports are the project's own code, not dependencies.
    ``__import__("x")`` and ``importlib.import_module("x")`` with a literal count as
    imports of ``x``; with anything else the answer cannot be known statically, so the
    evidence is null (``unknown``), never false.

Source that does not parse has no complexity and no import list: null (``unknown``).
No proposed source at all (null) makes every built-in null.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BUILTIN_GATES",
    "COMPLEXITY_CONVENTION",
    "CodeFacts",
    "analyse_source",
    "cyclomatic_complexities",
]

COMPLEXITY_CONVENTION: Final = "rowgate-mccabe/1"
SYNTAX_VALID: Final = "syntax_valid"
MAX_COMPLEXITY: Final = "max_cyclomatic_complexity_per_function"
UNAPPROVED_DEPENDENCIES: Final = "unapproved_dependencies"
#: Built-in gate name → whether its evidence is boolean (else numeric).
BUILTIN_GATES: Final = {SYNTAX_VALID: True, MAX_COMPLEXITY: False, UNAPPROVED_DEPENDENCIES: True}

_FUNCTIONS: Final = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class CodeFacts:
    """What the built-ins need from one source text; ``None`` where it cannot be known."""

    syntax_valid: bool | None
    max_complexity: int | None
    #: top-level modules imported, sorted; ``None`` when not statically knowable
    imports: tuple[str, ...] | None

    def unapproved(self, allowed: frozenset[str], allow_stdlib: bool) -> bool | None:
        if self.imports is None:
            return None
        return any(
            name not in allowed and not (allow_stdlib and name in sys.stdlib_module_names)
            for name in self.imports
        )


#: Decision points a node adds to its function's complexity (fixed ones).
_POINTS: Final[dict[type[ast.AST], int]] = {
    ast.If: 1,  # elif is a nested If
    ast.IfExp: 1,
    ast.For: 1,
    ast.AsyncFor: 1,
    ast.While: 1,
    ast.ExceptHandler: 1,
}


#: Node types with nothing below them that any built-in reads: skipped, not walked
#: (names, literals, contexts and operators are most of a typical tree).
_INERT: Final[frozenset[type[ast.AST]]] = frozenset(
    {ast.Name, ast.Constant, ast.alias, ast.Pass, ast.Break, ast.Continue}
    | {
        cls
        for base in (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
        for cls in base.__subclasses__()
    }
)


def _points(node: ast.AST) -> int:
    fixed = _POINTS.get(type(node))
    if fixed is not None:
        return fixed
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.match_case):
        wildcard = (
            isinstance(node.pattern, ast.MatchAs)
            and node.pattern.pattern is None
            and node.guard is None
        )
        return 0 if wildcard else 1
    return 0


def _scan(tree: ast.AST) -> tuple[dict[str, int], tuple[str, ...] | None]:
    """One traversal: complexity per function and the imported top-level modules.

    Each stack entry carries the function whose body it is in (None at module or class
    level) and the qualified-name prefix. Decorators, argument defaults and annotations
    belong to no function (they run in the enclosing scope at definition time).
    """
    complexity: dict[str, int] = {}
    imports: set[str] = set()
    knowable = True
    stack: list[tuple[ast.AST, str | None, str]] = [
        (node, None, "") for node in getattr(tree, "body", [])
    ]
    while stack:
        node, scope, prefix = stack.pop()
        if isinstance(node, _FUNCTIONS):
            name = prefix + node.name
            key = f"{name}@{node.lineno}"
            complexity[key] = 1
            outside = [*node.decorator_list, node.args]
            if node.returns is not None:
                outside.append(node.returns)
            stack.extend((n, None, prefix) for n in outside)
            stack.extend((n, key, name + ".") for n in node.body)
            continue
        if isinstance(node, ast.ClassDef):
            outside = [*node.decorator_list, *node.bases, *node.keywords]
            stack.extend((n, None, prefix) for n in outside)
            stack.extend((n, None, f"{prefix}{node.name}.") for n in node.body)
            continue
        if scope is not None:
            complexity[scope] += _points(node)
        if isinstance(node, ast.Import):
            imports.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                imports.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                if not argument.value.startswith("."):
                    imports.add(argument.value.split(".")[0])
            else:
                knowable = False
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend(
                    (item, scope, prefix)
                    for item in value
                    if isinstance(item, ast.AST) and type(item) not in _INERT
                )
            elif isinstance(value, ast.AST) and type(value) not in _INERT:
                stack.append((value, scope, prefix))
    return dict(sorted(complexity.items())), tuple(sorted(imports)) if knowable else None


def cyclomatic_complexities(tree: ast.AST) -> dict[str, int]:
    """Complexity per function under ``rowgate-mccabe/1``, keyed ``qualified.name@line``.

    Only a function's body counts: decorators and argument defaults are evaluated in
    the enclosing scope.
    """
    return _scan(tree)[0]


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def analyse_source(source: str | None) -> CodeFacts:
    """Parse ``source`` once and derive every built-in gate's evidence."""
    if source is None:
        return CodeFacts(None, None, None)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # ValueError: NUL bytes; RecursionError/MemoryError: pathological nesting.
        return CodeFacts(False, None, None)
    complexities, imports = _scan(tree)
    return CodeFacts(True, max(complexities.values(), default=0), imports)
