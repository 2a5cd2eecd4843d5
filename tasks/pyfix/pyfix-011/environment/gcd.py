def gcd(a, b):
    """Greatest common divisor of two non-negative integers."""
    while b:
        a, b = a % b, b
    return a
