"""Seed 004's output perturbation: regularised ERM solved at the sites, released
once with noise, and its estimator.
"""
