"""Small leaf helpers every package may use: canonical JSON and digests, safe reads of
candidate-written files, one-line validation errors, fault injection for crash tests,
folders removed off the critical path, the process-wide CPU slots.
"""
