def longest_common_prefix(words):
    """Longest string that is a prefix of every word in the list ('' for an empty list)."""
    raise NotImplementedError
