def word_count(text):
    """Map each lower-cased whitespace-separated word of text to how often it occurs."""
    out = {}
    for w in text.lower().split(' '):
        out[w] = out.get(w, 0) + 1
    return out
