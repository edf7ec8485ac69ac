"""The fuzz target: one input → one line gated on the fast path and the reference path.

An input is a selector byte and a line (``\\n`` becomes a space: a line never holds one).
The selector picks the kind the input declares (every registered kind, or none: the
record routes itself) and the campaign (default limits, tight limits, sanitization on).

For every input the target asserts:

* the parser: :func:`~pipeline.records.strict_json.parse_fast` returns the strict parser's value,
  to the type, or leaves the line to it (``None``); neither raises anything but the
  documented rejection (:class:`~pipeline.core.reasons.RejectLine`);
* the whole gate: :meth:`Gate.gate_batch` on a one-line batch and :meth:`Gate.gate_line`
  give the same disposition, kind, reason codes and hashes, and neither raises.

Run it (atheris, coverage-guided; libFuzzer flags pass through)::

    python -m tests.fuzz.gate_target CORPUS_DIR SEED_DIR -dict=tests/fuzz/json.dict \\
        -max_len=65536 -timeout=60 -max_total_time=3600 -artifact_prefix=FINDINGS_DIR/
    python -m tests.fuzz.gate_target FINDINGS_DIR/crash-<sha1>   # replay one finding

``python -m tests.fuzz.seeds SEED_DIR`` writes the seed corpus.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Final

import orjson

#: One line of the input, a campaign and a declared kind, chosen by the selector byte.
LIMITS_TIGHT: Final = {"max_line_bytes": 4096, "max_depth": 4, "max_items": 8}
CAMPAIGNS: Final = ("default", "tight", "sanitize")


@cache
def _gates() -> tuple[object, ...]:
    from pipeline.core.config import CampaignConfig, Limits, SanitizeSettings
    from pipeline.gate.gate import Gate

    default = Limits(max_line_bytes=64 * 1024)
    return (
        Gate(CampaignConfig(limits=default)),
        Gate(CampaignConfig(limits=Limits(**LIMITS_TIGHT))),
        Gate(CampaignConfig(limits=default, sanitize=SanitizeSettings(enabled=True))),
    )


@cache
def declared_kinds() -> tuple[str | None, ...]:
    """Every registered kind, then ``None`` (no declared kind)."""
    from pipeline.kinds import KINDS

    return (*sorted(KINDS), None)


def encode(line: bytes, declared: str | None, campaign: str = "default") -> bytes:
    """The input that makes the target gate ``line`` as ``declared`` in ``campaign``."""
    kinds = declared_kinds()
    return bytes([CAMPAIGNS.index(campaign) * len(kinds) + kinds.index(declared)]) + line


def decode(data: bytes) -> tuple[bytes, str | None, int]:
    """(line, declared kind, campaign index) of one fuzz input."""
    kinds = declared_kinds()
    selector = data[0] if data else 0
    declared = kinds[selector % len(kinds)]
    campaign = (selector // len(kinds)) % len(CAMPAIGNS)
    return data[1:].replace(b"\n", b" "), declared, campaign


def check_parser(line: bytes) -> None:
    """The fast parser agrees with the strict one, or leaves the line to it."""
    from pipeline.core.reasons import RejectLine
    from pipeline.records.strict_json import LONG_DIGITS, parse_fast, parse_value

    try:
        strict = parse_value(line)
        code = None
    except RejectLine as exc:
        strict, code = None, exc.reason.code
    fast = parse_fast(line)
    # Integers beyond int64 in orjson's compact form are the caller's to catch (the gate
    # re-parses a line holding 19 digits in a row unless the schema bounds integers).
    if fast is None or LONG_DIGITS.search(line):
        return
    assert code is None, f"the fast parser took a line the strict parser rejects ({code})"
    assert orjson.dumps(fast) == orjson.dumps(strict), "the parsers read different values"


def check(data: bytes) -> None:
    """The whole differential check for one fuzz input (the libFuzzer entry point)."""
    from pipeline.gate.gate import Gate
    from tests.gate.test_gate import _assert_paths_agree

    line, declared, campaign = decode(data)
    check_parser(line)
    gate = _gates()[campaign]
    assert isinstance(gate, Gate)
    _assert_paths_agree(gate, [(line, declared)])


def main(argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["pipeline"]):
        import pipeline.gate.gate
        import pipeline.kinds
        import pipeline.records.strict_json  # noqa: F401
    _gates()  # schemas compile once, before the first input
    atheris.Setup(argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
