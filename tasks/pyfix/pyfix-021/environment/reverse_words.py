def reverse_words(s):
    """Reverse the order of the whitespace-separated words of s, joined by single spaces."""
    raise NotImplementedError
