"""Seed 003: the smoothed discrepancy, single-stage Frank-Wolfe (Alg. 1), noisy
Frank-Wolfe and mirror descent (Alg. 2, 3), and the unlabeled adaptation estimator.
"""
