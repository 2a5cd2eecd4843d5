def nth_word_frequency(text, n):
    """The n-th most frequent lower-cased word (1-based; ties broken alphabetically), or None."""
    raise NotImplementedError
