"""Shared CLI plumbing: consoles, exit codes, turning library errors into messages."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.config import ConfigError
from pipeline.engines import EngineError
from pipeline.manifest import ManifestError
from pipeline.outdir import OutputBusyError, OutputExistsError, UnsafeOutputError
from pipeline.rubrics.model import RubricError
from pipeline.run import InputError, RunError
from pipeline.schemas import SchemaError

EXIT_MISMATCH: Final = 1
EXIT_USAGE: Final = 2
EXIT_INPUT: Final = 3
EXIT_FAILED: Final = 4

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int) -> NoReturn:
    # messages quote paths and expressions: brackets in them are text, not rich markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


@contextmanager
def library_errors() -> Iterator[None]:
    """Map library exceptions to messages and documented exit codes."""
    try:
        yield
    except (ConfigError, UnsafeOutputError) as exc:
        # an OUT that would put a user's files at risk is a wrong --out, refused before
        # any work; its content is not the problem (that would be an input error, 3)
        fail(str(exc), EXIT_USAGE)
    except (InputError, SchemaError, ManifestError, RubricError) as exc:
        fail(str(exc), EXIT_INPUT)
    except (RunError, EngineError, OutputExistsError, OutputBusyError) as exc:
        fail(str(exc), EXIT_FAILED)
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}", EXIT_FAILED)
    except KeyboardInterrupt:
        err.print("interrupted; no output was written")
        sys.exit(130)
