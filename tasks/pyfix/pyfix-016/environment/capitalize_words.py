def capitalize_words(s):
    """Upper-case the first letter of each space-separated word, keeping the spaces as they are."""
    return ' '.join(w[:1].upper() + w[1:] for w in s.split())
