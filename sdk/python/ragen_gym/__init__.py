"""ragen-gym's Python helper: an environment plugin is a class with `spec`, `reset` and `step`.

```python
from ragen_gym import Advice, Env, Expert, Spec, Step

class Guess(Env):
    def spec(self):
        return Spec("Answer with one of 0, 1, 2, 3.", actions=["0", "1", "2", "3"], max_steps=3)
    def reset(self, seed):
        self.target = seed % 4
        return "I picked a number in 0..4."
    def step(self, action):
        hit = action.strip() == str(self.target)
        return Step("Correct!" if hit else "Wrong.", reward=float(hit), terminated=hit, success=hit)
    def expert_info(self):  # optional: an expert for demonstrations and `eval --policy expert`
        return Expert("the number itself", optimal=True)
    def expert(self):
        return Advice(str(self.target), success_probability=1.0)
```

`ragen-gym build` turns the class named in `pyproject.toml` (`[tool.ragen-gym] entry =
"app:Guess"`) into a WebAssembly component with componentize-py and embeds the manifest; the
bindings glue is `ragen_gym/_component.py`. This module has no component imports, so an env can
be unit-tested with plain `python3`. The author's guide is `docs/plugins.md` in the ragen-gym
repository.
"""

import json
import random as _random

__all__ = ["Env", "Spec", "Step", "Expert", "Advice", "EnvError", "InvalidConfig", "NotReady",
           "log", "parse_config"]


class EnvError(Exception):
    """A domain failure the host records against the episode (WIT `env-error.other`)."""


class InvalidConfig(EnvError):
    """The config cannot be used; say which field and why (WIT `env-error.invalid-config`)."""


class NotReady(EnvError):
    """`step` before `reset` or after the episode ended (WIT `env-error.not-ready`)."""


class Spec:
    """What `Env.spec` returns (WIT `env-spec`; the id, version and default config are filled
    from the manifest and `Env.defaults`)."""

    def __init__(self, instruction, actions=None, legend=None, max_steps=10,
                 reward_threshold=None, description=None):
        self.instruction = instruction
        self.actions = None if actions is None else [str(a) for a in actions]
        self.legend = None if legend is None else dict(legend)
        self.max_steps = int(max_steps)
        self.reward_threshold = None if reward_threshold is None else float(reward_threshold)
        self.description = description


class Step:
    """What `Env.step` returns (WIT `step-result`). `effective` defaults to `valid`; `info` is a
    dict of named numbers."""

    def __init__(self, observation, reward=0.0, terminated=False, truncated=False,
                 success=False, valid=True, effective=None, info=None):
        self.observation = str(observation)
        self.reward = float(reward)
        self.terminated = bool(terminated)
        self.truncated = bool(truncated)
        self.success = bool(success)
        self.valid = bool(valid)
        self.effective = self.valid if effective is None else bool(effective)
        self.info = dict(info or {})

    @classmethod
    def invalid(cls, observation, info=None):
        """An action the env did not understand: no reward, no state change."""
        return cls(observation, valid=False, effective=False, info=info)


class Expert:
    """What `Env.expert_info` returns when the env has an expert (WIT `expert-info`): how it
    chooses, and whether following it maximises the probability of success (`optimal`)."""

    def __init__(self, description, optimal=False):
        self.description = str(description)
        self.optimal = bool(optimal)


class Advice:
    """What `Env.expert` returns (WIT `advice`): the actions an expert would take now, equally
    good, the preferred one first, and the probability that following it succeeds, if known.
    `expert` may also return one action name, or a list of them."""

    def __init__(self, actions, success_probability=None):
        self.actions = [actions] if isinstance(actions, str) else [str(a) for a in actions]
        self.success_probability = (None if success_probability is None
                                    else float(success_probability))


class Env:
    """Base class of an environment.

    `defaults` lists the config keys and their default values; the host's JSON config may set
    any of them (other keys, or values of another type, are `InvalidConfig` errors naming the
    key), and the result is `self.config`. Raise `InvalidConfig` in `__init__` for range checks.
    Before each `reset(seed)`, `self.random` is a `random.Random(seed)`: draw every random choice
    from it so that the same seed gives the same episode.
    """

    defaults = {}

    def __init__(self, config):
        self.config = config
        self.random = _random.Random(0)

    def spec(self):
        raise NotImplementedError("an Env subclass defines spec(self) -> Spec")

    def reset(self, seed):
        raise NotImplementedError("an Env subclass defines reset(self, seed) -> str")

    def step(self, action):
        raise NotImplementedError("an Env subclass defines step(self, action) -> Step")

    def expert_info(self):
        """The env's expert for `self.config` as an `Expert`, or None (the default): no expert."""
        return None

    def expert(self):
        """The expert's advice from the current state (`Advice`, an action name or a list of
        them); must not change the env. Called only when `expert_info` is not None."""
        raise EnvError(f"{type(self).__name__} has no expert")


def log(message, level="info"):
    """Write a line to the host's log, tagged with the plugin id (`debug`, `info`, `warn`,
    `error`). A no-op outside the component (plain `python3`)."""
    try:
        from wit_world.imports import log as wit_log
    except ImportError:
        return
    wit_log.log(getattr(wit_log.Level, level.upper()), str(message))


def _same_type(default, value):
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return default is None or isinstance(value, type(default))


def parse_config(defaults, text):
    """The config dict for a JSON object `text` over `defaults` ("" and "{}" mean the defaults)."""
    config = json.loads(json.dumps(defaults))
    if not text.strip():
        return config
    try:
        given = json.loads(text)
    except ValueError as e:
        raise InvalidConfig(f"config is not valid JSON: {e}") from None
    if not isinstance(given, dict):
        raise InvalidConfig("config must be a JSON object")
    for key, value in given.items():
        if key not in defaults:
            raise InvalidConfig(f"field `{key}`: unknown field, expected one of {sorted(defaults)}")
        if not _same_type(defaults[key], value):
            raise InvalidConfig(f"field `{key}`: expected {type(defaults[key]).__name__}, "
                                f"got {json.dumps(value)}")
        config[key] = float(value) if isinstance(defaults[key], float) else value
    return config
