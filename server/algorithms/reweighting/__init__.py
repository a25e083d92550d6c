"""Seed 000's reweighted adaptation (PCnvxAdap, Alg. 1; PNCnvxAdap, Alg. 2):
the objectives, the coordinator loop and the estimators.
"""
