"""RAGEN's Countdown (`ragen/env/countdown/`; docs/plugins.md, "Countdown") as a ragen-gym plugin.

Reach the target number with every given number used exactly once and + - * / and parentheses.
The scoring is RAGEN's (`compute_score` in `ragen/env/countdown/utils.py`, after TinyZero):
0 when the integers in the answer are not exactly the given numbers (as a multiset),
`format_score` (0.1) when they are but the expression does not evaluate to within 1e-5 of the
target, `score` (1) when it does. The episode always ends after one answer; success means the
full score. Observations are RAGEN's: `Target: 24, nums: [3, 8, 1]`, then
`Your answer get 1.0 points.`

RAGEN reads its tasks from the Hugging Face dataset `Jiayi-Pan/Countdown-Tasks-3to4`, which
cannot be fetched here: `make_task` generates them from the reset seed instead. It draws 3 or 4
numbers in 1..99 and combines them all, in a random order and shape, with random operators
(keeping every intermediate value a positive whole number) until the result is a target in
1..100, so every task has a solution. RAGEN evaluates answers with Python's `eval` (empty
builtins) after a character check; this plugin parses them with `evaluate` below, which gives
the same value for every answer that passes that check. The expert answers with the expression
the task was made from.
"""

import re
from fractions import Fraction

from ragen_gym import Advice, Env, Expert, InvalidConfig, Spec, Step

ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
TOKEN = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\*\*|//|[-+*/()])")
OPS = "+-*/"


def combine(a, op, b):
    """a op b over positive whole numbers, or None when the result is not one."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": Fraction(a, b)}[op]
    return int(value) if value > 0 and value == int(value) else None


def make_task(rng, cfg):
    """(target, numbers, a solution) drawn from `rng` (a seeded `random.Random`)."""
    count = rng.randint(cfg["min_numbers"], cfg["max_numbers"])
    while True:
        numbers = [rng.randint(1, cfg["max_number"]) for _ in range(count)]
        items = [(n, str(n)) for n in numbers]
        rng.shuffle(items)
        while len(items) > 1:
            (a, ea), (b, eb) = items.pop(rng.randrange(len(items))), items.pop(rng.randrange(len(items)))
            op = rng.choice(OPS)
            value = combine(a, op, b)
            if value is None:
                break
            items.append((value, f"({ea} {op} {eb})"))
        else:
            if 1 <= items[0][0] <= cfg["max_target"]:
                return items[0][0], numbers, items[0][1][1:-1]


class Parser:
    """Python's arithmetic on the characters RAGEN allows: + - * / // ** unary signs, parentheses,
    integers and decimals, with `eval`'s precedence and results (int, or float after `/`)."""

    def __init__(self, text):
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            m = TOKEN.match(text, pos)
            if not m:
                raise ValueError(f"unexpected character at {pos}")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.at = 0

    def peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self):
        self.at += 1
        return self.tokens[self.at - 1]

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self):
        value = self.unary()
        while self.peek() in ("*", "/", "//"):
            op, rhs = self.take(), self.unary()
            value = value * rhs if op == "*" else value / rhs if op == "/" else value // rhs
        return value

    def unary(self):
        if self.peek() in ("+", "-"):
            return self.unary() if self.take() == "+" else -self.unary()
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() == "**":
            self.take()
            exponent = self.unary()
            if isinstance(exponent, int) and abs(base) > 1 and abs(exponent) * abs(base).bit_length() > 4096:
                raise OverflowError("power too large")  # eval would compute it; never the target
            return base**exponent
        return base

    def atom(self):
        token = self.take() if self.peek() is not None else None
        if token == "(":
            value = self.expr()
            if self.peek() != ")":
                raise ValueError("unclosed parenthesis")
            self.take()
            return value
        if token is None or not (token[0].isdigit() or token[0] == "."):
            raise ValueError(f"expected a number, got {token!r}")
        return float(token) if "." in token else int(token)


def evaluate(text):
    """The value of an arithmetic answer; raises on anything `eval` would reject."""
    if not ALLOWED.match(text):
        raise ValueError("characters other than digits, + - * / ( ) . and spaces")
    parser = Parser(text)
    value = parser.expr()
    if parser.peek() is not None:
        raise ValueError(f"unexpected {parser.peek()!r}")
    return value


def score(answer, target, numbers, cfg):
    """RAGEN's `compute_score`: 0, `format_score` or `score`."""
    if sorted(int(n) for n in re.findall(r"\d+", answer)) != sorted(numbers):
        return 0
    try:
        return cfg["score"] if abs(evaluate(answer) - target) < 1e-5 else cfg["format_score"]
    except (ValueError, ArithmeticError):
        return cfg["format_score"]


class Countdown(Env):
    defaults = {"min_numbers": 3, "max_numbers": 4, "max_number": 99, "max_target": 100,
                "score": 1.0, "format_score": 0.1}

    def __init__(self, config):
        super().__init__(config)
        if not 2 <= config["min_numbers"] <= config["max_numbers"] <= 6:
            raise InvalidConfig("fields `min_numbers`, `max_numbers`: need 2 <= min <= max <= 6")
        if not (1 <= config["max_number"] <= 1000 and 1 <= config["max_target"] <= 10**6):
            raise InvalidConfig("fields `max_number`, `max_target`: need 1..=1000 and 1..=1000000")

    def spec(self):
        return Spec(
            "Use every number in the list exactly once, with + - * / and parentheses, to write "
            "an expression equal to the target. For Target: 10, nums: [2, 3, 4] an answer is "
            "<answer>2 * 3 + 4</answer>.",
            max_steps=1,
            reward_threshold=self.config["score"],
        )

    def reset(self, seed):
        self.target, self.numbers, self.solution = make_task(self.random, self.config)
        return f"Target: {self.target}, nums: {self.numbers}"

    def step(self, action):
        reward = score(action, self.target, self.numbers, self.config)
        return Step(f"Your answer get {reward} points.", reward=reward, terminated=True,
                    success=reward == self.config["score"], valid=bool(ALLOWED.match(action)))

    def expert_info(self):
        return Expert("the expression the task was generated from", optimal=True)

    def expert(self):
        return Advice(self.solution, success_probability=1.0)
