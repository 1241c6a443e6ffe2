"""Rules of the "guess the number" example environment (pure Python, no component bindings).

A secret number is drawn from 1..max_number by ``random.Random(seed)`` (Mersenne Twister seeded
from the integer, so the same seed gives the same secret in every process). Each guess is
answered with "higher", "lower" or "correct"; a correct guess pays 1.0 and terminates the
episode, and running out of guesses truncates it.
"""

import json
import random

DEFAULT_CONFIG = {"max_number": 8, "max_guesses": 4}


class ConfigError(ValueError):
    """A config field is unknown or out of range; the message names the field."""


def parse_config(text):
    """Parse the env config JSON ("" means the defaults); reject unknown or bad fields."""
    config = dict(DEFAULT_CONFIG)
    if text.strip():
        try:
            given = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"config is not valid JSON: {e}") from None
        if not isinstance(given, dict):
            raise ConfigError("config must be a JSON object")
        for key, value in given.items():
            if key not in DEFAULT_CONFIG:
                raise ConfigError(f"field `{key}`: unknown field, expected one of {sorted(DEFAULT_CONFIG)}")
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"field `{key}`: expected an integer, got {value!r}")
            config[key] = value
    if not 2 <= config["max_number"] <= 100:
        raise ConfigError(f"field `max_number`: {config['max_number']} is outside 2..=100")
    if not 1 <= config["max_guesses"] <= 100:
        raise ConfigError(f"field `max_guesses`: {config['max_guesses']} is outside 1..=100")
    return config


class NotReady(RuntimeError):
    """step() before reset() or after the episode ended."""


class Game:
    """One episode of guess-the-number."""

    def __init__(self, config):
        self.config = config
        self.secret = None
        self.guesses = 0
        self.done = False

    def action_names(self):
        return [str(n) for n in range(1, self.config["max_number"] + 1)]

    def reset(self, seed):
        self.secret = random.Random(seed).randint(1, self.config["max_number"])
        self.guesses = 0
        self.done = False
        return (f"I picked a whole number from 1 to {self.config['max_number']}. "
                f"You have {self.config['max_guesses']} guesses.")

    def step(self, action):
        """Returns (observation, reward, terminated, truncated, valid, effective, success)."""
        if self.secret is None:
            raise NotReady("step called before reset")
        if self.done:
            raise NotReady("the episode has ended; call reset")
        text = action.strip()
        if text not in self.action_names():
            return (f"{action!r} is not a number from 1 to {self.config['max_number']}.",
                    0.0, False, False, False, False, False)
        guess = int(text)
        self.guesses += 1
        if guess == self.secret:
            self.done = True
            return (f"{guess} is correct.", 1.0, True, False, True, True, True)
        hint = "higher" if guess < self.secret else "lower"
        truncated = self.guesses >= self.config["max_guesses"]
        self.done = truncated
        left = self.config["max_guesses"] - self.guesses
        return (f"{guess} is wrong; the number is {hint}. {left} guesses left.",
                0.0, False, truncated, True, True, False)
