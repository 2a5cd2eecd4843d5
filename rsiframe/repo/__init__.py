"""Candidates as git commits: pure-Python git trees, the run's candidate repository and its
verified exports, the guardrail that checks a mutation's actual diff against the surface,
and the framework's 3-way merge.
"""
