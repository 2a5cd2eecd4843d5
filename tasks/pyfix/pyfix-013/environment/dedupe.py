def dedupe(xs):
    """Remove duplicates from xs, keeping first occurrences in order."""
    return list(set(xs))
