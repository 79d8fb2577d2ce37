"""Agents on the real engine for tests, built as agent/model.build_agent builds them: a sampler
with its SamplerSettings, a Policy, TurnSettings. `new_agent(engine, root, mode=..., max_tokens=8,
max_steps=3, ...)` sends each setting to the value that has a field of its name."""
import os
from dataclasses import fields

from agent.loop.driver import Agent
from agent.samplers.engine import EngineSampler
from agent.settings import SamplerSettings, TurnSettings
from tools.permissions import Policy

SAMPLER_FIELDS = {f.name for f in fields(SamplerSettings)}
TURN_FIELDS = {f.name for f in fields(TurnSettings)}


def new_agent(engine, root, *, mode: str = "ask", policy=None, extra_mask=None, messages=None,
              meta=None, store=None, **settings) -> Agent:
    unknown = set(settings) - SAMPLER_FIELDS - TURN_FIELDS
    if unknown:
        raise TypeError(f"no setting named {', '.join(sorted(unknown))}")
    root = os.path.realpath(os.fspath(root))
    sampling = SamplerSettings(**{k: v for k, v in settings.items() if k in SAMPLER_FIELDS})
    turn = TurnSettings(**{k: v for k, v in settings.items() if k in TURN_FIELDS})
    policy = policy if policy is not None else Policy.load(root, mode=mode)
    return Agent(EngineSampler(engine, root, sampling, extra_mask), root, policy, turn, messages, meta, store)
