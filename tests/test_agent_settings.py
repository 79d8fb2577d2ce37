"""agent/settings.py and the Sampler protocol (agent/samplers/sampler.py): settings are frozen values passed
whole, so a fork or a rollout agent is a `replace` and keeps every setting it does not change;
both samplers and the test double keep the protocol."""
from dataclasses import FrozenInstanceError, fields, replace

import pytest

from agent.headless import rollout_agent
from agent.samplers.engine import EngineSampler
from agent.samplers.sampler import Sampler
from agent.settings import SamplerSettings, TurnSettings
from agent_builder import new_agent
from race_helpers import ScriptedModel

ODD = SamplerSettings(temperature=0.3, top_k=7, top_p=0.9, seed=11, max_tokens=33, reserve=40,
                      retry_temperature=0.5, constrain=False, ground=False, names=False,
                      loop_guard=False, copy_bias=1.5)
ODD_TURN = TurnSettings(max_steps=4, retries=1, tool_timeout=9.0, memory=False, snapshots=True,
                        sandbox=False, network=True, question_guard=False)


def test_every_field_differs_from_its_default():
    """The values above test the copies: each field differs from its default (snapshots: a
    rollout agent turns it off)."""
    for value, default in ((ODD, SamplerSettings()), (ODD_TURN, TurnSettings())):
        same = [f.name for f in fields(value) if getattr(value, f.name) == getattr(default, f.name)]
        assert same in ([], ["snapshots"]), same


def test_settings_are_frozen_and_checked():
    with pytest.raises(FrozenInstanceError):
        ODD.temperature = 1.0
    with pytest.raises(ValueError, match="max_tokens"):
        SamplerSettings(max_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplerSettings(top_p=0)
    with pytest.raises(ValueError, match="max_steps"):
        TurnSettings(max_steps=0)
    assert SamplerSettings(temperature=0.0).temperature_for(retry=True) == 0.7
    assert SamplerSettings(temperature=0.2).temperature_for(retry=True) == 0.2
    assert SamplerSettings(max_tokens=100).reserve_for(1024) == 100
    assert SamplerSettings(max_tokens=1000).reserve_for(1024) == 256


def test_samplers_keep_the_protocol(engine, repo):
    assert isinstance(EngineSampler(engine, str(repo)), Sampler)
    assert isinstance(ScriptedModel([]), Sampler)
    from agent.samplers.remote import RemoteSampler
    assert all(hasattr(RemoteSampler, name) for name in ("reply", "sync", "invalidate", "reset",
                                                          "tree_changed", "fork", "context_used", "describe"))


def test_a_fork_and_a_rollout_agent_keep_every_setting(engine, repo, tmp_path):
    agent = new_agent(engine, repo, extra_mask=lambda out: None,
                      **{f.name: getattr(ODD, f.name) for f in fields(ODD)},
                      **{f.name: getattr(ODD_TURN, f.name) for f in fields(ODD_TURN)})
    assert agent.sampler.settings == ODD and agent.settings == ODD_TURN
    assert agent.sampler.reserve == 40 and agent.sampler.grounding is None and agent.sampler.loops is None
    fork = agent.sampler.fork(str(tmp_path), replace(ODD, seed=3))
    assert fork.settings == replace(ODD, seed=3) and fork.extra_mask is agent.sampler.extra_mask
    rollout = rollout_agent(agent, tmp_path, 0.8, 5)
    assert rollout.sampler.settings == replace(ODD, temperature=0.8, seed=5)
    assert rollout.settings == replace(ODD_TURN, snapshots=False)
    assert rollout.sampler.engine is engine and rollout.root == str(tmp_path.resolve())
