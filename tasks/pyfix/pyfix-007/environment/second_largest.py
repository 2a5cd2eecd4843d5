def second_largest(xs):
    """The second largest distinct value in xs, or None if there is none."""
    vals = sorted(xs)
    return vals[-2] if len(vals) >= 2 else None
