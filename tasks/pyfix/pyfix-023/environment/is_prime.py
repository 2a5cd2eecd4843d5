def is_prime(n):
    """True if the integer n is prime."""
    raise NotImplementedError
