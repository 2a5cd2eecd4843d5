"""The lifecycle loop: preflight, run start, the scheduler (K candidates in flight), the
mutation transaction, evaluation, certifying, gate/record/reflect, and the fail-closed
budget checks.
"""
