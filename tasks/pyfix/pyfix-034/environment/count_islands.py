def count_islands(grid):
    """Number of 4-connected groups of '#' cells in a list of equal-length strings."""
    raise NotImplementedError
