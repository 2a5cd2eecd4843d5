"""The provider's secrets and a first message, for tests of the run's model gateway."""

from __future__ import annotations

PROVIDER_SECRET = "sk-provider-secret-0123456789"


PROVIDER_KEY = "sk-provider-SECRET-0123456789"


MSG = [{"role": "user", "content": "please fix the function"}]
