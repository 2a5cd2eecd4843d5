def run_length(s):
    """Run-length encode s: 'aaab' -> 'a3b1'."""
    raise NotImplementedError
