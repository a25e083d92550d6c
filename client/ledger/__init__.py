"""The site's privacy ledger: every release charged, in SQLite, before it leaves;
its hash chain, reservations, latches, views and the ``privadapt ledger`` commands.
"""
