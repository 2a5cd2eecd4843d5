def title_case_ratio(words):
    """Fraction of the words that start with an upper-case letter, rounded to 2 decimals (0.0 for no words)."""
    raise NotImplementedError
