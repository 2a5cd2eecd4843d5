"""The viewer's screens: runs, run, lineage, candidate, help."""
