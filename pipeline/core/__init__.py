"""The ground every layer stands on: the campaign configuration, the reason codes, the
errors rowgate raises, default limits, where the bundled schemas and rubrics live, how
each process's allocators hand memory back, and the array helpers the phases share.

Imports nothing of rowgate's.
"""
