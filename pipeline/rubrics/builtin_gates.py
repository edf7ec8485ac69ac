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
from collections.abc import Iterable
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


class _Complexity(ast.NodeVisitor):
    """Counts decision points of one function body, stopping at nested scopes."""

    def __init__(self) -> None:
        self.points = 0
        #: nested functions and classes: scopes of their own
        self.nested: list[ast.stmt] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.nested.append(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.nested.append(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.nested.append(node)

    def _count(self, node: ast.AST, points: int = 1) -> None:
        self.points += points
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:  # elif is a nested If
        self._count(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._count(node)

    def visit_For(self, node: ast.For) -> None:
        self._count(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._count(node)

    def visit_While(self, node: ast.While) -> None:
        self._count(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._count(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self._count(node, len(node.values) - 1)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._count(node, 1 + len(node.ifs))

    def visit_match_case(self, node: ast.match_case) -> None:
        wildcard = (
            isinstance(node.pattern, ast.MatchAs)
            and node.pattern.pattern is None
            and node.guard is None
        )
        self._count(node, 0 if wildcard else 1)


def cyclomatic_complexities(tree: ast.AST) -> dict[str, int]:
    """Complexity per function under ``rowgate-mccabe/1``, keyed ``qualified.name@line``.

    Only a function's body counts: decorators and argument defaults are evaluated in
    the enclosing scope.
    """
    result: dict[str, int] = {}
    pending: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def scopes(nodes: Iterable[ast.AST], prefix: str) -> None:
        """Queue the functions among ``nodes`` (which belong to no function)."""
        for node in nodes:
            if isinstance(node, _FUNCTIONS):
                pending.append((prefix, node))
            elif isinstance(node, ast.ClassDef):
                scopes(node.body, f"{prefix}{node.name}.")
            else:
                # e.g. functions defined inside module-level if/try/with blocks
                scopes((c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)), prefix)

    scopes(getattr(tree, "body", []), "")
    while pending:
        prefix, function = pending.pop()
        counter = _Complexity()
        for statement in function.body:
            counter.visit(statement)
        name = f"{prefix}{function.name}"
        result[f"{name}@{function.lineno}"] = 1 + counter.points
        scopes(counter.nested, f"{name}.")
    return dict(sorted(result.items()))


def _imports(tree: ast.AST) -> tuple[str, ...] | None:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                if not argument.value.startswith("."):
                    found.add(argument.value.split(".")[0])
            else:
                return None
    return tuple(sorted(found))


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
    complexities = cyclomatic_complexities(tree)
    return CodeFacts(True, max(complexities.values(), default=0), _imports(tree))
