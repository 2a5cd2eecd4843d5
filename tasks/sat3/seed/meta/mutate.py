"""A mutator carried by the candidate (HyperAgents-style, offline): it perturbs the solver's
knobs (the space in knobs.yaml) and, with probability ``self_rate``, its own parameters in
meta/mutator.yaml, so the way children are made evolves with the solver. Run by rsiframe as
a ``candidate:`` operator (sandboxed, from the parent's committed tree)."""

from __future__ import annotations

import yaml

from rsiframe.api import MutateContext, MutateOperator, Mutation

PARAMS = "meta/mutator.yaml"


def _get(data, key):
    for part in key.split("."):
        data = data[part]
    return data


def _set(data, key, value):
    *head, last = key.split(".")
    for part in head:
        data = data[part]
    data[last] = value


def _move(knob, current, rng):
    if "choices" in knob:
        return rng.choice([c for c in knob["choices"] if c != current] or knob["choices"])
    lo, hi = knob["range"]
    step = knob.get("step", 1)
    return min(hi, max(lo, current + rng.choice([-1, 1]) * step * rng.randint(1, 3)))


class SelfMutator(MutateOperator):
    name = "self_mutator"

    def mutate(self, ctx: MutateContext) -> Mutation:
        work, rng = ctx.workdir, ctx.rng
        params = yaml.safe_load((work / PARAMS).read_text())
        space = yaml.safe_load((work / "knobs.yaml").read_text())["knobs"]
        weights = params.get("weights", {})
        n = rng.randint(1, min(int(params.get("max_changes", 1)), len(space)))
        chosen = []
        while len(chosen) < n:
            knob = rng.choices(space, [float(weights.get(k["key"], 1.0)) for k in space])[0]
            if knob not in chosen:
                chosen.append(knob)
        solver = yaml.safe_load((work / "solver.yaml").read_text())
        moves = []
        for knob in chosen:
            old = _get(solver, knob["key"])
            new = _move(knob, old, rng)
            _set(solver, knob["key"], new)
            moves.append(f"{knob['key']}: {old} -> {new}")
        (work / "solver.yaml").write_text(yaml.safe_dump(solver, sort_keys=False))
        if rng.random() < float(params.get("self_rate", 0.0)):
            key = rng.choice(sorted(weights))
            weights[key] = round(float(weights[key]) * rng.choice([0.5, 2.0]), 4)
            params["max_changes"] = max(1, min(3, int(params["max_changes"]) + rng.choice([-1, 1])))
            (work / PARAMS).write_text(yaml.safe_dump(params, sort_keys=False))
            moves.append(
                f"mutator: weight {key} -> {weights[key]}, max_changes {params['max_changes']}"
            )
        return Mutation(description="; ".join(moves), details={"moves": moves})
