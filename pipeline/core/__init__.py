"""The ground every layer stands on: the campaign configuration, the reason codes, the
errors rowgate raises, default limits, and where the bundled schemas and rubrics live.

Imports nothing of rowgate's.
"""
