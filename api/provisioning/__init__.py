"""``privadapt provision``: a startup kit per participant, with its systemd unit.
"""
