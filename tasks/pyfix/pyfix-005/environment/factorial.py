def factorial(n):
    """n! for an integer n >= 0 (0! is 1)."""
    out = 1
    for i in range(2, n):
        out *= i
    return out
