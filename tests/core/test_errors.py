"""The error hierarchy: every library error is a RowgateError that states its exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import pipeline
from pipeline.core import errors
from pipeline.core.errors import EXIT_FAILED, EXIT_INPUT, EXIT_USAGE, RowgateError

EXIT_CODES = {EXIT_USAGE, EXIT_INPUT, EXIT_FAILED}


def walk_library_errors() -> list[type[RowgateError]]:
    """Every RowgateError subclass defined in a module of the package, found by importing
    each module (not by ``__subclasses__``, which misses a module nothing imported yet).
    A module needing an optional extra that is not installed (``ray``) is passed over."""
    found: dict[str, type[RowgateError]] = {}
    for module_info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if module_info.name == "pipeline.__main__":
            continue
        try:
            module = importlib.import_module(module_info.name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "pipeline":
                raise
            continue
        for _, value in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(value, RowgateError)
                and value is not RowgateError
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


LIBRARY_ERRORS = walk_library_errors()


def test_the_walk_finds_the_library_errors() -> None:
    names = {cls.__name__ for cls in LIBRARY_ERRORS}
    assert {
        "BindingError",
        "CanonicalJSONError",
        "ConfigError",
        "DecompressionLimitError",
        "EngineError",
        "InputError",
        "ManifestError",
        "MappingError",
        "OutputBusyError",
        "OutputExistsError",
        "ReferenceTableError",
        "RubricError",
        "RunError",
        "SchemaError",
        "SelectorError",
        "TreeError",
        "UnknownKindError",
        "UnsafeOutputError",
    } <= names


def test_the_root_states_no_exit_code() -> None:
    """So that a subclass which forgets its own fails the test below."""
    assert not hasattr(RowgateError, "exit_code")


@pytest.mark.parametrize("cls", LIBRARY_ERRORS, ids=lambda cls: cls.__name__)
def test_every_library_error_states_an_exit_code(cls: type[RowgateError]) -> None:
    assert getattr(cls, "exit_code", None) in EXIT_CODES


@pytest.mark.parametrize("cls", LIBRARY_ERRORS, ids=lambda cls: cls.__name__)
def test_every_library_error_is_drawn_in_the_hierarchy(cls: type[RowgateError]) -> None:
    assert errors.__doc__ is not None
    assert cls.__name__ in errors.__doc__


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("ConfigError", ValueError),
        ("SchemaError", ValueError),
        ("UnknownKindError", KeyError),
        ("RunError", RuntimeError),
        ("EngineError", RuntimeError),
        ("InputError", ValueError),
    ],
)
def test_secondary_bases_are_kept(name: str, base: type[Exception]) -> None:
    """Code that catches the built-in base (``except KeyError``) keeps catching them."""
    (cls,) = (cls for cls in LIBRARY_ERRORS if cls.__name__ == name)
    assert issubclass(cls, base)


def test_a_listing_keeps_its_lines_apart_through_a_worker_and_a_rewrap() -> None:
    """The command line prints a message's listed problems as lines and any other
    newline as an escape, so the lines travel with the error."""
    import pickle

    from pipeline.core.errors import InputError
    from pipeline.rubrics.model import RubricError

    error = RubricError.listing("r\n  x.json: not a valid rubric:", "$.a: missing", "$.b: empty")
    assert str(error) == "r\n  x.json: not a valid rubric:\n  $.a: missing\n  $.b: empty"
    assert pickle.loads(pickle.dumps(error)).lines == error.lines
    assert error.lines == ("r\n  x.json: not a valid rubric:", "$.a: missing", "$.b: empty")
    assert InputError.listing(*error.lines).lines == error.lines
    assert InputError("a\n  b").lines == ("a\n  b",)
