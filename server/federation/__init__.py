"""The coordinator's federations: the networked one (secure-aggregation rounds)
and the recording one that plans a job's releases.
"""
