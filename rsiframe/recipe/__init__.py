"""The recipe: its pure pydantic schema (slots, budget, models, the evaluator's engine configs,
the executor), extends:/--set/--unset, and loading with operator resolution. Schema modules
import only each other; behaviour imports them, never the reverse.
"""
