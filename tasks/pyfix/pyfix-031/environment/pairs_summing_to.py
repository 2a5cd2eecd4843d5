def pairs_summing_to(xs, target):
    """Sorted list of distinct pairs (a, b), a <= b, of values from xs with a + b == target (each element used once per pair)."""
    raise NotImplementedError
