"""A whole federation on this machine: a work directory of certificates and
configs, the daemons as processes, and ``privadapt simulate``.
"""
