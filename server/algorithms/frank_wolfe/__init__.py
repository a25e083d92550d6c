"""Seed 002: DP Frank-Wolfe over an l1 ball and private transfer from public
sources, with their estimators.
"""
