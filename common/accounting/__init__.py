"""Privacy accounting: composing releases over dp-accounting, the per-release
PLDs and RDP curves, exact accounting of integer noise, and calibration.
"""
