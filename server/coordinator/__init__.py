"""``privadapt-coordinator``: the coordinator daemon, its two gRPC services and
the admission of calls before they cost a thread.
"""
