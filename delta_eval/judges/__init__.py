"""Judging a pair: stage 1 (deterministic equivalence), stage 2 (a cheap equivalence judge), stage 3 (a pairwise
judge), run in that order by the cascade so only real differences reach the expensive judge.

Judges see a blind :class:`~delta_eval.judges.base.PairView` and call models only through the run's
:class:`~delta_eval.judges.context.JudgeContext`.
"""
