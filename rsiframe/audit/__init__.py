"""Reading a run after the fact: verify (signatures, chain, locks, --reproduce), the status
report, and drift of files on disk against the run's locks.
"""
