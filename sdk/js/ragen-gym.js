// ragen-gym's JavaScript helper: an environment plugin is a class with `spec`, `reset` and `step`.
//
//   import { Env } from "./ragen-gym.js";
//   export default class Guess extends Env {
//     spec() { return { instruction: "Answer with one of 0, 1, 2, 3.", actions: ["0", "1", "2", "3"], maxSteps: 3 }; }
//     reset(seed) { this.target = Number(seed % 4n); return "I picked a number in 0..4."; }
//     step(action) {
//       const hit = action.trim() === String(this.target);
//       return { observation: hit ? "Correct!" : "Wrong.", reward: hit ? 1 : 0, terminated: hit, success: hit };
//     }
//   }
//
// An env may also have an expert (what a good action is now: demonstrations, `eval --policy
// expert`, `sft`): `expertInfo()` returns `{ description, optimal }` (or nothing: no expert) and
// `expert()` the action, a list of equally good ones (preferred first), or
// `{ actions, successProbability }`.
//
// `ragen-gym build` bundles the default export of the entry file named in package.json
// (`"ragen-gym": { "entry": "env.js" }`) with `bindEnv` and `bindExpert` below into a WebAssembly component
// (componentize-js) and embeds the manifest. This file imports nothing from the component, so an
// env can be unit-tested with plain `node`. The author's guide is docs/plugins.md in the
// ragen-gym repository.

/** A domain failure the host records against the episode (WIT `env-error`). */
export class EnvError extends Error {
  constructor(message, tag = "other") {
    super(message);
    // componentize-js returns a thrown value's `payload` as the `err` of a `result`.
    this.payload = { tag, val: String(message) };
  }
}

/** The config cannot be used; say which field and why (WIT `env-error.invalid-config`). */
export class InvalidConfig extends EnvError {
  constructor(message) {
    super(message, "invalid-config");
  }
}

/** `step` before `reset` or after the episode ended (WIT `env-error.not-ready`). */
export class NotReady extends EnvError {
  constructor(message) {
    super(message, "not-ready");
  }
}

/** A seeded generator (splitmix64): `this.random` of an env, seeded from the reset seed. */
export class Random {
  constructor(seed) {
    this.state = BigInt.asUintN(64, BigInt(seed));
  }
  /** The next 64-bit value, as a BigInt. */
  nextU64() {
    this.state = BigInt.asUintN(64, this.state + 0x9e3779b97f4a7c15n);
    let z = this.state;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
  }
  /** A float in [0, 1). */
  random() {
    return Number(this.nextU64() >> 11n) / 2 ** 53;
  }
  /** An integer in [lo, hi] (inclusive). */
  int(lo, hi) {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }
}

/**
 * Base class of an environment. `static defaults` lists the config keys and their default values;
 * the host's JSON config may set any of them (other keys, or values of another type, are
 * `InvalidConfig` errors naming the key), and the result is `this.config`. Throw `InvalidConfig`
 * in the constructor for range checks. Before each `reset(seed)` (`seed` is a BigInt),
 * `this.random` is a `Random` seeded from it: draw every random choice from it.
 */
export class Env {
  static defaults = {};
  constructor(config) {
    this.config = config;
    this.random = new Random(0n);
  }
}

/** An action the env did not understand: no reward, no state change. */
export function invalid(observation, info = {}) {
  return { observation, valid: false, effective: false, info };
}

/** The config object for a JSON object `text` over `defaults` ("" and "{}" mean the defaults). */
export function parseConfig(defaults, text) {
  const config = JSON.parse(JSON.stringify(defaults));
  if (text.trim() === "") return config;
  let given;
  try {
    given = JSON.parse(text);
  } catch (e) {
    throw new InvalidConfig(`config is not valid JSON: ${e.message}`);
  }
  if (given === null || typeof given !== "object" || Array.isArray(given)) {
    throw new InvalidConfig("config must be a JSON object");
  }
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(defaults, key)) {
      throw new InvalidConfig(`field \`${key}\`: unknown field, expected one of ${Object.keys(defaults).sort().join(", ")}`);
    }
    const want = defaults[key] === null ? typeof value : typeof defaults[key];
    if (typeof value !== want || Array.isArray(value) !== Array.isArray(defaults[key])) {
      throw new InvalidConfig(`field \`${key}\`: expected ${want}, got ${JSON.stringify(value)}`);
    }
    config[key] = value;
  }
  return config;
}

let hostLog = () => {};

/** Write a line to the host's log (`debug`, `info`, `warn`, `error`); a no-op under `node`. */
export function log(message, level = "info") {
  hostLog(level, String(message));
}

const metrics = (info = {}) => Object.entries(info).map(([name, value]) => ({ name, value: Number(value) }));

// An error for the component boundary: ours carry a WIT payload; anything else traps.
const boundary = (e) => (e instanceof Error ? e : new Error(String(e)));

const makeEnv = (EnvClass, text) => new EnvClass(parseConfig(EnvClass.defaults ?? {}, text));

const guarded = (f) => {
  try {
    return f();
  } catch (e) {
    throw boundary(e);
  }
};

/**
 * The `ragen:gym/expert` export for `EnvClass` (interface 0.1.1; called by the generated entry
 * module when the project's WIT has it). `advise` gets the `env` resource `bindEnv` made.
 */
export function bindExpert(EnvClass) {
  return {
    info(config) {
      const info = guarded(() => makeEnv(EnvClass, config).expertInfo?.());
      return info ? { description: String(info.description), optimal: Boolean(info.optimal) } : undefined;
    },
    advise(state) {
      if (state.error) throw state.error;
      if (!state.running) throw new NotReady("no episode running; call reset");
      const a = guarded(() => {
        if (typeof state.env.expert !== "function") throw new EnvError(`${EnvClass.name} has no expert`);
        return state.env.expert();
      });
      const advice = typeof a === "string" || Array.isArray(a) ? { actions: a } : a;
      const actions = typeof advice.actions === "string" ? [advice.actions] : advice.actions.map(String);
      const p = advice.successProbability;
      return { actions, successProbability: p === undefined || p === null ? undefined : Number(p) };
    },
  };
}

/**
 * The `ragen:gym/environment` export for `EnvClass` (called by the entry module that
 * `ragen-gym build` generates, with the manifest and the host's `log` import).
 */
export function bindEnv(EnvClass, manifest, witLog) {
  if (witLog) hostLog = witLog;
  const make = (text) => makeEnv(EnvClass, text);
  const call = guarded;
  class Resource {
    constructor(config) {
      // The WIT constructor cannot fail: keep the error and report it on reset and step.
      try {
        this.env = make(config);
      } catch (e) {
        this.error = boundary(e);
      }
      this.running = false;
    }
    reset(seed) {
      if (this.error) throw this.error;
      this.env.random = new Random(seed);
      const out = call(() => this.env.reset(seed));
      const [observation, info] = Array.isArray(out) ? out : [out, {}];
      this.running = true;
      return { observation: String(observation), info: metrics(info) };
    }
    step(action) {
      if (this.error) throw this.error;
      if (!this.running) throw new NotReady("step before reset, or after the episode ended");
      const r = call(() => this.env.step(action));
      const valid = r.valid ?? true;
      const result = {
        observation: String(r.observation),
        reward: Number(r.reward ?? 0),
        terminated: Boolean(r.terminated),
        truncated: Boolean(r.truncated),
        actionIsValid: Boolean(valid),
        actionIsEffective: Boolean(r.effective ?? valid),
        success: Boolean(r.success),
        info: metrics(r.info),
      };
      this.running = !(result.terminated || result.truncated);
      return result;
    }
  }
  return {
    spec(config) {
      const s = call(() => make(config).spec());
      const legend = s.legend && Object.entries(s.legend).map(([symbol, meaning]) => ({ symbol, meaning }));
      return {
        id: manifest.id,
        version: manifest.version,
        description: s.description ?? manifest.description,
        instruction: s.instruction,
        actionNames: s.actions?.map(String),
        symbolLegend: legend ?? undefined,
        maxEpisodeSteps: s.maxSteps ?? 10,
        rewardThreshold: s.rewardThreshold,
        defaultConfig: JSON.stringify(EnvClass.defaults ?? {}),
      };
    },
    Env: Resource,
  };
}
