"""The ``privadapt`` command: operator, site-ledger and researcher commands.
It composes both roles, so it lives beside the researcher API, not in
``server`` or ``client``.
"""
