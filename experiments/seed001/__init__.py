"""Seed 001 experiments (private source-target clustering)."""
