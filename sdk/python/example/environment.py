"""The `env` resource of the `environment` interface, over the rules in `guess.py`."""

from componentize_py_types import Err
from wit_world.exports import environment
from wit_world.imports.types import (
    EnvError_InvalidConfig,
    EnvError_NotReady,
    Metric,
    ResetResult,
    StepResult,
)

import guess


class Env(environment.Env):
    def __init__(self, config: str) -> None:
        # The constructor cannot fail in the WIT: keep the error and report it on reset/step.
        try:
            self.game = guess.Game(guess.parse_config(config))
            self.error = None
        except guess.ConfigError as e:
            self.game = None
            self.error = str(e)

    def _game(self) -> guess.Game:
        if self.game is None:
            raise Err(EnvError_InvalidConfig(self.error))
        return self.game

    def reset(self, seed: int) -> ResetResult:
        observation = self._game().reset(seed)
        return ResetResult(observation=observation, info=[])

    def step(self, action: str) -> StepResult:
        game = self._game()
        try:
            obs, reward, terminated, truncated, valid, effective, success = game.step(action)
        except guess.NotReady as e:
            raise Err(EnvError_NotReady(str(e)))
        return StepResult(
            observation=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            action_is_valid=valid,
            action_is_effective=effective,
            success=success,
            info=[Metric(name="guesses", value=float(game.guesses))],
        )
