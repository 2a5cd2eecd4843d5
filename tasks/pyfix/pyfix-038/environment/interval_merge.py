def interval_merge(intervals):
    """Merge overlapping closed intervals [a, b]; return them sorted as lists."""
    raise NotImplementedError
