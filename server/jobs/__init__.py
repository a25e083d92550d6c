"""Jobs at the coordinator: the job table, specifications, launch checks and
privacy plans, running and resuming, progress, results and reports.
"""
