"""Entry point of the Python example plugin: the free functions of the `environment` interface.

componentize-py naming (sdk/python/README.md): the interface's free functions live in a class
named after the interface (`Environment`) in the app module, and the `env` resource class lives
in a module named after the interface (`environment.py`; anything else fails to build with
`ModuleNotFoundError`).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import EnvError_InvalidConfig, EnvSpec

import guess


class Environment(exports.Environment):
    def spec(self, config: str) -> EnvSpec:
        try:
            parsed = guess.parse_config(config)
        except guess.ConfigError as e:
            raise Err(EnvError_InvalidConfig(str(e)))
        game = guess.Game(parsed)
        return EnvSpec(
            id="examples/GuessNumber-v0",
            version="0.1.0",
            description="Guess a secret number with higher/lower hints (Python example plugin).",
            instruction=(
                f"Guess the secret whole number between 1 and {parsed['max_number']}. After each "
                "guess you are told whether the number is higher or lower. Answer with one "
                "number, for example <answer>3</answer>."
            ),
            action_names=game.action_names(),
            symbol_legend=None,
            max_episode_steps=parsed["max_guesses"],
            reward_threshold=1.0,
            default_config=json.dumps(guess.DEFAULT_CONFIG),
        )
