"""Every self-test scenario by name: the one list ``selftest integrity`` runs. A new
scenario module defines its own dict of scenarios and is added here."""

from __future__ import annotations

from rsiframe.selftest.build_scenarios import BUILD_SCENARIOS
from rsiframe.selftest.common import Scenario
from rsiframe.selftest.gateway_hacks import GATEWAY_SCENARIOS
from rsiframe.selftest.hostile import HOSTILE_SCENARIOS
from rsiframe.selftest.saboteur import SABOTEUR_SCENARIOS
from rsiframe.selftest.scenarios import CORE_SCENARIOS
from rsiframe.selftest.task_hacks import TASK_HACK_SCENARIOS

SCENARIOS: dict[str, Scenario] = {
    **CORE_SCENARIOS,
    **BUILD_SCENARIOS,
    **HOSTILE_SCENARIOS,
    **SABOTEUR_SCENARIOS,
    **TASK_HACK_SCENARIOS,
    **GATEWAY_SCENARIOS,
}
