def rotate(xs, k):
    """Rotate list xs right by k positions (k may exceed len(xs)); return a new list."""
    if not xs:
        return []
    return xs[-k:] + xs[:-k]
