"""Seed 004 and the job-level selection: private selection among candidates,
private grid search over norm bounds, confidence boosting, ``radius='auto'``
and SelectedAdaptation.
"""
