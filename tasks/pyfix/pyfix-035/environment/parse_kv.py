def parse_kv(s):
    """Parse 'a=1;b=2' into {'a': '1', 'b': '2'}; whitespace around keys and values is stripped, empty parts skipped."""
    raise NotImplementedError
