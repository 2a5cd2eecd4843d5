"""Operators in their slots: finding them (entry points, module:Class, files, a candidate's own
tree), calling them (one checked, timed call per slot), the read-only run view they get,
their code identity in the lock, and the sandboxed runner of untrusted (candidate-carried)
operators.
"""
