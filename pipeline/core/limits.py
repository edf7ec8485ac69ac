"""Default bounds shared by the configuration and the code they bound.

The configuration (:mod:`pipeline.core.config`) offers each as a ``limits.*`` or
``engine.*`` setting; the parser and the reader fall back to them when called alone.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BATCH_BYTES", "MAX_DECOMPRESSED_BYTES", "MAX_EXPANSION_RATIO", "MAX_NESTING"]

#: The deepest value orjson writes (it raises beyond 254 levels of containers), and so the
#: deepest the gate hashes: ``limits.max_depth`` may not exceed it. orjson reads up to
#: 1024 levels, deeper than the standard library's scanner can before Python's recursion
#: limit: the fast parser leaves anything deeper than this to the strict one.
MAX_NESTING: Final = 254
#: A batch ends at ``engine.batch_lines`` lines or once it holds ``engine.batch_bytes``
#: bytes of lines (by default this), whichever comes first: 4096 lines of 3 KB are 13 MB,
#: but 4096 of the 8 MiB the line limit allows would be 32 GiB in one worker. A worker holds
#: ~6.6 times a batch's bytes while gating it: on the scale benchmark's 300 MB export, 8 MiB
#: batches (~2,500 lines) lowered the process tree's peak from 656 to 624 MB, and with
#: near and normalised dedupe from 960 to 883 MB, against 16 MiB, in the same time.
BATCH_BYTES: Final = 8 << 20
#: Default bounds of a compressed input's decompressed stream (``limits.*`` in the config).
#: Exports of JSONL compress 5-10x (the samples here: gzip -9 5-9x, zstd -19 5-10x), so a
#: stream of more than 100x its file is a bomb, or data no export looks like; gzip cannot
#: exceed ~1032x, zstd reaches ~32000x (2 GB of zeros at -19: 62 KB).
MAX_DECOMPRESSED_BYTES: Final = 64 << 30
MAX_EXPANSION_RATIO: Final = 100
