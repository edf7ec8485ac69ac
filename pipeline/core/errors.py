"""The root of every error rowgate raises, and the exit code each one stands for.

Every library error derives from :class:`RowgateError` and states, as the class attribute
``exit_code``, the exit code the command line reports it with
(:func:`pipeline.cli._common.library_errors` maps by that attribute, never by a list of
classes). A class may keep a built-in secondary base (``ValueError``, ``KeyError``,
``RuntimeError``) so that code catching that base keeps working::

    RowgateError
    ├── exit 2, usage: a flag, config or OUT the command refuses
    │   ├── ConfigError (core.config)
    │   │   └── LineageKeyError (records.lineage): the lineage key cannot be read
    │   ├── SelectorError (sanitize.paths): a sanitize policy's field path
    │   ├── UnsafeOutputError (output.outdir)
    │   └── OutputURIError (output.remote): an OUT URI rowgate cannot or will not write
    ├── exit 3, input: something the command reads is missing, corrupt or refused
    │   ├── InputError
    │   │   ├── DecompressionLimitError (gate.reader)
    │   │   └── ReferenceTableError (kinds.rules)
    │   ├── UnknownKindError (kinds.base)
    │   ├── SchemaError (records.schemas)
    │   ├── MappingError (gate.arrow_mapping): a schema or value the Arrow layout cannot hold
    │   ├── ManifestError (output.manifest)
    │   └── RubricError (rubrics.model)
    │       ├── BindingError (rubrics.bindings)
    │       ├── MissingSourceError (rubrics.model): a rubric or policy file not there
    │       └── TreeError (rubrics.tree)
    └── exit 4, failed: the command could not complete
        ├── CanonicalJSONError (records.canonical): a value with no canonical JSON form
        ├── EngineError (engines)
        ├── OutputExistsError, OutputBusyError (output.outdir)
        ├── RemotePublishError (output.remote): an upload to OUT's store not committed
        └── RunError (jobs.run)

Messages name files, keys, kinds and rules, never a record's value: the command line
prints them as they are, but for the characters a terminal acts on (a newline too: a
path holding one forged a message line). A message that lists problems, one an indented
line, is made by :meth:`RowgateError.listing`, which keeps its lines apart.
"""

from __future__ import annotations

from typing import ClassVar, Final, Self

__all__ = [
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "INTERRUPTED",
    "InputError",
    "RowgateError",
]

#: a bad flag, config key or value; an OUT the command refuses to write
EXIT_USAGE: Final = 2
#: an input that is missing, corrupt or refused
EXIT_INPUT: Final = 3
#: the command failed; nothing was written
EXIT_FAILED: Final = 4
#: Ctrl-C (128 + SIGINT), and the line the command says then
EXIT_INTERRUPTED: Final = 130
INTERRUPTED: Final = "interrupted; no output was written"


class RowgateError(Exception):
    """Base of every error rowgate raises for a user's input, configuration or output.

    A subclass sets ``exit_code`` (:data:`EXIT_USAGE`, :data:`EXIT_INPUT` or
    :data:`EXIT_FAILED`); the root leaves it unset, so a subclass that forgets it fails
    ``tests/core/test_errors.py``.
    """

    exit_code: ClassVar[int]
    _lines: tuple[str, ...] = ()

    @classmethod
    def listing(cls, head: str, *items: str) -> Self:
        """An error whose message is ``head``, then each of ``items`` on its own line
        indented by two spaces. These are its only lines: a newline inside ``head`` or an
        item (a path or name holding one) is printed as an escape."""
        error = cls("\n  ".join((head, *items)))
        error._lines = (head, *items)
        return error

    @property
    def lines(self) -> tuple[str, ...]:
        """The message's lines: the head and the items it lists (:meth:`listing`), or
        the whole message, one line."""
        return self._lines or (str(self),)


class InputError(RowgateError, ValueError):
    """An input that cannot be read as declared (missing, corrupt, wrong compression)."""

    exit_code: ClassVar[int] = EXIT_INPUT
