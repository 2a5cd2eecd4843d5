"""Models in the loop: the run's OpenAI-compatible gateway (tokens, reservations, retries, the
request cache), its process, the fsynced ledger of paid calls, the engine's side of a run's
models, and the scripted stub provider.
"""
