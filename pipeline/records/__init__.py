"""What one record is, byte for byte: the strict JSON parser, canonical JSON (RFC 8785),
the pinned JSON Schemas, and the lineage hashes that tie a row to its bytes.

May import: :mod:`pipeline.core`.
"""
