"""agent-trace-v1 (seed 000): a retrieval agent's prompt, tool calls and final answer."""

from __future__ import annotations

from typing import Any, Final

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
