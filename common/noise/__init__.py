"""Noise for releases: float samplers from a CSPRNG, and the exact integer
samplers (discrete Laplace and Gaussian, Polya and Skellam shares) with their
certified laws.
"""
