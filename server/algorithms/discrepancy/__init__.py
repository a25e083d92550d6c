"""Seed 000's private discrepancy estimate d_DP (Section 4) and its estimator.
"""
