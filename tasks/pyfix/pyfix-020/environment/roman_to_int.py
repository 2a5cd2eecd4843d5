def roman_to_int(s):
    """Value of a Roman numeral (I V X L C D M, subtractive form)."""
    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}
    return sum(v[c] for c in s)
