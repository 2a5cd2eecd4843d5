"""A run's folder and its append-only, signed, hash-chained event log: the event models,
content-addressed artifacts, the state fold, the resume snapshot, and the read-only loader
the viewer and verify share.
"""
