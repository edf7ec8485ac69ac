"""agent-trace-v1 (seed 000): a retrieval agent's prompt, tool calls and final answer."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.lineage import ContentFingerprint

CONTENT: Final = ContentFingerprint(b"rowgate:agent-trace-content:v1\x00")


@register_kind
class AgentTrace(RecordKind):
    id = "agent-trace-v1"

    def fingerprint(self, record: dict[str, Any]) -> str:
        """Prompt, the ordered calls (tool, arguments, result) and the final answer.

        Identity and transport fields (task id, call ids, reported latency) are left out:
        they do not change what the trace says.
        """
        calls = [[s["tool"], s["arguments"], s["result"]] for s in record["steps"]]
        return CONTENT.digest(
            (record["prompt"], ContentFingerprint.json_field(calls), record["final_answer"])
        )

    def dedupe_key(self) -> DedupeKey:
        """The prompt and the call sequence (tool and arguments, in order); call ids,
        latencies and results are how one run went, not what was asked and done."""
        call = (
            pl.element().struct.field("tool")
            + pl.lit(" ")
            + pl.element().struct.field("arguments").struct.json_encode()
        )
        return DedupeKey(
            "prompt + call sequence",
            ("prompt", "steps"),
            (
                KeyField("prompt", pl.col("prompt")),
                KeyField("calls", pl.col("steps").list.eval(call).list.join("\n")),
            ),
        )
