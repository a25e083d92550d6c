"""``privadapt-site``: the site daemon, its configuration, and what it does with
each work item its coordinator pushes.
"""
