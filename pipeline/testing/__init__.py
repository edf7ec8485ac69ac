"""Generated data for tests, benchmarks and the bundled samples: valid and planted-invalid
records of every kind (:mod:`~pipeline.testing.synthetic`) and near-duplicate corpora
(:mod:`~pipeline.testing.corpus`).

Never imported by rowgate itself (the import contract in ``pyproject.toml`` checks it).
"""
