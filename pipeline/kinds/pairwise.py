"""pairwise-v2 (seed 000): a prompt, two candidate responses, a preference and ratings."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.lineage import PAIRWISE_CONTENT_V1, ContentFingerprint

#: Multi-turn decisive rows commit to the whole conversation, not one prompt string.
MULTI_TURN: Final = ContentFingerprint(b"rowgate:pairwise-content-multiturn:v1\x00")
#: tie / neither: no winner, so the pair is committed in canonical order with the label.
UNRANKED: Final = ContentFingerprint(b"rowgate:pairwise-content-unranked:v1\x00")


@register_kind
class Pairwise(RecordKind):
    id = "pairwise-v2"
    version_field = "schema_version"
    version_value = "pairwise-v2"

    def fingerprint(self, record: dict[str, Any]) -> str:
        """Seed 002's profile for a decisive single-user-turn row; separate domains else.

        Seed 002: "Multi-turn tasks need a separate profile committing to the complete
        system, user, and tool context. Ties need canonical A/B order and an explicit tie
        label under a distinct domain." The patch is "" when absent, as the seed defines.
        """
        messages = record["messages"]
        preference = record["preference"]
        patch = record["golden_patch"] or ""
        a, b = record["response_a"], record["response_b"]
        if preference in ("A", "B"):
            chosen, rejected = (a, b) if preference == "A" else (b, a)
            if len(messages) == 1 and messages[0]["role"] == "user":
                return PAIRWISE_CONTENT_V1.digest((messages[0]["content"], chosen, rejected, patch))
            context = ContentFingerprint.json_field(messages)
            return MULTI_TURN.digest((context, chosen, rejected, patch))
        first, second = sorted((a, b), key=lambda s: s.encode("utf-8"))
        context = ContentFingerprint.json_field(messages)
        return UNRANKED.digest((preference, context, first, second, patch))

    def dedupe_key(self) -> DedupeKey:
        """The same conversation and the same *unordered* pair of responses: a row with A
        and B swapped is the same comparison whatever its preference says."""
        turn = (
            pl.element().struct.field("role") + pl.lit(": ") + pl.element().struct.field("content")
        )
        return DedupeKey(
            "conversation + unordered pair of responses",
            ("messages", "response_a", "response_b"),
            (
                KeyField("conversation", pl.col("messages").list.eval(turn).list.join("\n")),
                KeyField("responses", pl.concat_list("response_a", "response_b"), unordered=True),
            ),
        )
