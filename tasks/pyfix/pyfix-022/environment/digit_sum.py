def digit_sum(n):
    """Sum of the decimal digits of the integer n (sign ignored)."""
    raise NotImplementedError
