def is_palindrome(s):
    """True if s reads the same backwards, ignoring case and non-alphanumeric characters."""
    t = [c for c in s if c.isalnum()]
    return t == t[::-1]
