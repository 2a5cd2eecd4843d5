def snake_to_camel(s):
    """Convert snake_case to camelCase."""
    raise NotImplementedError
