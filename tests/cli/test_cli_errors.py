"""Library errors reach the user as a message and their class's exit code, never a traceback."""

from __future__ import annotations

from typing import ClassVar

import pytest
from typer.testing import CliRunner

import pipeline.records.schemas
from pipeline.cli import app
from pipeline.core.errors import EXIT_INPUT, RowgateError
from tests.core.test_errors import LIBRARY_ERRORS

runner = CliRunner()


def _raising(error: Exception) -> type:
    class Registry:
        def __init__(self) -> None:
            raise error

    return Registry


@pytest.mark.parametrize("cls", LIBRARY_ERRORS, ids=lambda cls: cls.__name__)
def test_a_library_error_raised_in_a_command_exits_with_its_code(
    monkeypatch: pytest.MonkeyPatch, cls: type[RowgateError]
) -> None:
    """The command line listed the classes it mapped: MappingError, SelectorError,
    UnknownKindError and CanonicalJSONError were missing, so they surfaced as a defect."""
    error = cls("planted: schemas/x.json is unusable")
    monkeypatch.setattr(pipeline.records.schemas, "SchemaRegistry", _raising(error))
    result = runner.invoke(app, ["schemas", "list"])
    assert result.exit_code == cls.exit_code, result.output
    assert result.stderr == f"error: {error}\n"
    assert "Traceback" not in result.output


def test_a_new_library_error_needs_no_change_to_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class PlantedError(RowgateError):
        exit_code: ClassVar[int] = EXIT_INPUT

    monkeypatch.setattr(
        pipeline.records.schemas, "SchemaRegistry", _raising(PlantedError("planted"))
    )
    result = runner.invoke(app, ["schemas", "list"])
    assert result.exit_code == EXIT_INPUT
    assert result.stderr == "error: planted\n"
