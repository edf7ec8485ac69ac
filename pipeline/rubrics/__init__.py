"""Weighted rubrics (DESIGN §3.10): the rubric format, campaign bindings, built-in gates,
vectorised scoring, and ARI tree aggregation.

* :mod:`~pipeline.rubrics.model` — rubric files: format, checks, digests, registry;
* :mod:`~pipeline.rubrics.bindings` — criteria and gates bound to a kind's columns;
* :mod:`~pipeline.rubrics.builtin_gates` — deterministic gates over proposed Python code;
* :mod:`~pipeline.rubrics.scoring` — states, gates-first weighted score, reasons;
* :mod:`~pipeline.rubrics.campaign` — what a campaign config asks for, checked up front;
* :mod:`~pipeline.rubrics.tree` — ARI replication rubric trees: leaf grades → every node;
* :mod:`~pipeline.rubrics.failures` — the AutoQA contract's §19 failure classes, mapped.

The decision policy (the AutoQA evaluation contract's decision model) that turns states
into actions is :mod:`pipeline.rubrics.decision_policy`; the
global-phase stages are :mod:`pipeline.decide.stages.scoring` and :mod:`pipeline.decide.stages.decision`.
"""

from __future__ import annotations

from pipeline.rubrics.model import Rubric, RubricError, RubricRegistry, State, load_rubric

__all__ = ["Rubric", "RubricError", "RubricRegistry", "State", "load_rubric"]
