def anagrams(a, b):
    """True if a and b are anagrams of each other, ignoring case and spaces."""
    raise NotImplementedError
