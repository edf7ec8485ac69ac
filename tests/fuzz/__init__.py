"""Coverage-guided fuzzing of the strict parser and the gate (atheris), differential
against the reference path: the target (:mod:`tests.fuzz.gate_target`), its seed corpus
(:mod:`tests.fuzz.seeds`); ``tests/gate/test_fuzz_gate.py`` runs both."""
