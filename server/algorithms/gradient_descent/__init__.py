"""Target-only baselines: noisy projected gradient descent and noisy minibatch
SGD, with their estimators.
"""
