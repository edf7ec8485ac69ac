"""Built-in code gates: syntax, the documented complexity convention, imports."""

from __future__ import annotations

import ast
import textwrap

import pytest

from pipeline.rubrics.builtin_gates import analyse_source, cyclomatic_complexities


def _complexity(source: str) -> dict[str, int]:
    return cyclomatic_complexities(ast.parse(textwrap.dedent(source)))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    return 1\n", 1),
        (
            "def f(a):\n    if a:\n        return 1\n    elif a > 1:\n        return 2\n    else:\n        return 3\n",
            3,
        ),
        ("def f(a):\n    return 1 if a else 2\n", 2),
        ("def f(a, b, c):\n    return a and b or c\n", 3),
        ("def f(a, b, c, d):\n    return a and b and c and d\n", 4),
        (
            "def f(xs):\n    for x in xs:\n        pass\n    else:\n        pass\n    while xs:\n        break\n",
            3,
        ),
        ("async def f(xs):\n    async for x in xs:\n        pass\n", 2),
        (
            "def f():\n    try:\n        pass\n    except A:\n        pass\n    except B:\n        pass\n    else:\n        pass\n    finally:\n        pass\n",
            3,
        ),
        ("def f(xs):\n    return [x for x in xs if x if x > 1 for y in x]\n", 5),
        (
            "def f(a):\n    match a:\n        case 1:\n            pass\n        case [x] if x:\n            pass\n        case _:\n            pass\n",
            3,
        ),
        ("def f(a):\n    with a:\n        assert a\n    return lambda q: q or a\n", 2),
        ("def f(a=1 if x else 2):\n    return a\n", 1),
    ],
)
def test_complexity_convention(source: str, expected: int) -> None:
    assert list(_complexity(source).values()) == [expected]


def test_nested_functions_and_methods_count_on_their_own() -> None:
    source = """
    def outer(a):
        if a:
            pass
        def inner(b):
            while b:
                if b:
                    pass
        class Local:
            if a:
                pass
            def method(self):
                return a or self
        return inner

    class Top:
        def method(self, x):
            for _ in x:
                pass

    if True:
        def conditional():
            pass
    """
    assert _complexity(source) == {
        "Top.method@17": 2,
        "conditional@22": 1,
        "outer.Local.method@12": 2,
        "outer.inner@5": 3,
        "outer@2": 2,
    }


def test_analyse_source() -> None:
    facts = analyse_source(
        "import os.path\nimport numpy as np\nfrom . import sibling\nfrom requests import get\n"
        "def f(a):\n    return __import__('json')\n"
    )
    assert facts.syntax_valid is True
    assert facts.max_complexity == 1
    assert facts.imports == ("json", "numpy", "os", "requests")
    assert facts.unapproved(frozenset({"numpy", "requests"}), allow_stdlib=True) is False
    assert facts.unapproved(frozenset({"numpy"}), allow_stdlib=True) is True
    assert facts.unapproved(frozenset({"numpy", "requests"}), allow_stdlib=False) is True
    assert analyse_source("x = 1\n").max_complexity == 0


@pytest.mark.parametrize("source", ["def f(:\n", "x = (\n", "a\x00b", "def f():\nreturn 1"])
def test_unparseable_source(source: str) -> None:
    facts = analyse_source(source)
    assert (facts.syntax_valid, facts.max_complexity, facts.imports) == (False, None, None)
    assert facts.unapproved(frozenset(), allow_stdlib=True) is None


def test_no_source_and_dynamic_imports_are_unknown() -> None:
    assert analyse_source(None).syntax_valid is None
    dynamic = analyse_source("import importlib\nimportlib.import_module(name)\n")
    assert dynamic.syntax_valid is True
    assert dynamic.imports is None
    assert dynamic.unapproved(frozenset({"importlib"}), allow_stdlib=True) is None
