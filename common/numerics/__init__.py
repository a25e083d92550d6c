"""Numerics the bounds rest on: geometry, fixed-point encoding, the exact
trust-region solver and its certificate, proved rounding bounds.
"""
