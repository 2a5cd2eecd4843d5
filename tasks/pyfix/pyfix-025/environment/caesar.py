def caesar(s, k):
    """Shift each ASCII letter of s by k places in the alphabet (wrapping, case kept); other characters unchanged."""
    raise NotImplementedError
