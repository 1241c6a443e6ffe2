// Guess a number in 0..4 in three tries; the reset seed picks it.
import { Env, invalid } from "./ragen-gym.js";

export default class {{class}} extends Env {
  spec() {
    return { instruction: "Answer with one of 0, 1, 2, 3.", actions: ["0", "1", "2", "3"], maxSteps: 3 };
  }

  reset(seed) {
    this.target = this.random.int(0, 3);
    return "I picked a number in 0..4.";
  }

  step(action) {
    if (!["0", "1", "2", "3"].includes(action.trim())) return invalid("Answer 0, 1, 2 or 3.");
    const hit = action.trim() === String(this.target);
    const observation = hit ? "Correct!" : "Wrong, guess again.";
    return { observation, reward: hit ? 1 : 0, terminated: hit, success: hit };
  }

  // Optional: an expert (demonstrations, `ragen-gym eval --policy expert`, `ragen-gym sft`).
  expertInfo() {
    return { description: "the number itself", optimal: true };
  }

  expert() {
    return { actions: [String(this.target)], successProbability: 1 };
  }
}
