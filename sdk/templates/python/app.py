"""Guess a number in 0..4 in three tries; the reset seed picks it."""

from ragen_gym import Advice, Env, Expert, Spec, Step


class {{class}}(Env):
    def spec(self):
        return Spec("Answer with one of 0, 1, 2, 3.", actions=["0", "1", "2", "3"], max_steps=3)

    def reset(self, seed):
        self.target = self.random.randrange(4)
        return "I picked a number in 0..4."

    def step(self, action):
        if action.strip() not in ("0", "1", "2", "3"):
            return Step.invalid("Answer 0, 1, 2 or 3.")
        hit = action.strip() == str(self.target)
        text = "Correct!" if hit else "Wrong, guess again."
        return Step(text, reward=float(hit), terminated=hit, success=hit)

    # Optional: an expert (demonstrations, `ragen-gym eval --policy expert`, `ragen-gym sft`).
    def expert_info(self):
        return Expert("the number itself", optimal=True)

    def expert(self):
        return Advice(str(self.target), success_probability=1.0)
