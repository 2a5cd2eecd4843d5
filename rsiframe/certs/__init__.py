"""Certificates: where private keys live, Ed25519 signing in DSSE envelopes, and the certified
record (an in-toto statement) that binds a score to its candidate, recipe, evaluator and
task set.
"""
