"""Task sets: the Harbor task format (and the lighter local one), content digests, the
train/gate/sealed split, the task lock and the Merkle fingerprint.
"""
