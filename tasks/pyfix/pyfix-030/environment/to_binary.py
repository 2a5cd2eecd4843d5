def to_binary(n):
    """Binary representation of an integer n >= 0 without prefix."""
    raise NotImplementedError
