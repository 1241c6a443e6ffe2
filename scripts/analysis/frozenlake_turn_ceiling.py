"""The best success probability on slippery FrozenLake for an agent that sees the board only at the
start of each turn: within a turn it commits to a sequence of up to `per_turn` actions (open loop),
across turns it replans from what it sees (closed loop), with at most 10 actions in all (RAGEN's
budget). `turns x 1` is the fully closed-loop optimum, the value iteration of the plugin's expert
(`plugins/frozen-lake/src/expert.rs`). With fixed turns of `per_turn` moves the plugin's
turn-planning expert (`{"expert_moves_per_turn": per_turn}`, `plugins/frozen-lake/src/turn_plan.rs`)
plays this optimum; here a turn may also be shorter, which 5 x 2 uses a little (0.481 against the
plugin's 0.480 on the validation maps; 2 x 5: 0.455 both).

Dynamics as the plugin (`plugins/frozen-lake/src/env.rs`, after gymnasium's FrozenLake): a move
goes the intended way with probability 1/3 and to each perpendicular side with 1/3; a move off the
board stays; holes and the goal end the episode.

It also gives what a perfect imitator of the plugin's demonstrations scores in each layout. The
demonstrations (`ragen-gym sft`, `host/starpo/src/rollout/expert.rs`) plan each turn closed loop
on a shadow env with the episode's own slips, so a turn's answer holds moves that react to slips
the model cannot see when the turn begins. An imitator that plays, at each turn start, an action
sequence drawn from the distribution of the expert's sequences over the slips (`sample`, sampling
at temperature 1) or the sequence decoded greedily from it, move by move (`greedy`, temperature
towards 0), is evaluated exactly.

Usage (needs numpy): python3 scripts/analysis/frozenlake_turn_ceiling.py RUN/demonstrations.jsonl
(any `trajectories.jsonl`-shaped file of FrozenLake episodes with `grid` or `grid_coord`
observations; each record's first observation gives its map).
"""
import json
import sys

import numpy as np

MOVES = [(0, -1), (1, 0), (0, 1), (-1, 0)]  # Left, Down, Right, Up (gymnasium's action order)
BUDGET = 10


def maps(path):
    for line in open(path):
        record = json.loads(line)
        observation = record["turns"][0]["observation"]
        yield record["seed"], observation.split("Grid:\n")[1].strip().split("\n")


def transitions(grid, p_intended=1 / 3):
    """T[a, s, s'] over the cells plus two absorbing states, WIN and FAIL; the start cell."""
    rows, cols = len(grid), len(grid[0])
    win, fail = rows * cols, rows * cols + 1
    t = np.zeros((4, rows * cols + 2, rows * cols + 2))
    t[:, win, win] = t[:, fail, fail] = 1
    start = None
    for r in range(rows):
        for c in range(cols):
            s = r * cols + c
            start = s if grid[r][c] == "P" else start
            for a in range(4):
                sides = ((a, p_intended), ((a - 1) % 4, (1 - p_intended) / 2),
                         ((a + 1) % 4, (1 - p_intended) / 2))
                for b, p in sides:
                    rr, cc = r + MOVES[b][0], c + MOVES[b][1]
                    if not (0 <= rr < rows and 0 <= cc < cols):
                        rr, cc = r, c
                    cell = grid[rr][cc]
                    t[a, s, win if cell == "G" else fail if cell == "O" else rr * cols + cc] += p
    return t, start, win


def turn_ceiling(t, start, win, turns, per_turn):
    """max over turn plans of P(goal), by backward induction over turns and actions left."""
    products, lengths, layer = [], [], [np.eye(t.shape[1])]
    for n in range(1, per_turn + 1):
        layer = [m @ t[a] for m in layer for a in range(4)]
        products += layer
        lengths += [n] * len(layer)
    products, lengths = np.stack(products), np.array(lengths)
    value = np.zeros((BUDGET + 1, t.shape[1]))
    value[:, win] = 1
    for _ in range(turns):
        new = value.copy()
        for left in range(1, BUDGET + 1):
            ok = lengths <= left
            after = np.einsum("kij,kj->ki", products[ok], value[left - lengths[ok]])
            new[left] = np.maximum(new[left], after.max(axis=0))
        value = new
    return value[BUDGET, start]


def expert_tables(t, win):
    """pi[k, s]: the expert's action with k actions left (value iteration over the budget; ties
    to the better value with fewer actions left, then gymnasium's action order, as `optimal` in
    `plugins/frozen-lake/src/expert.rs`)."""
    n = t.shape[1]
    value = np.zeros((BUDGET + 1, n))
    value[:, win] = 1
    pi = np.zeros((BUDGET + 1, n), dtype=int)
    for k in range(1, BUDGET + 1):
        q = np.einsum("asj,j->as", t, value[k - 1])
        value[k] = q.max(axis=0)
        value[k, win] = 1
        for s in range(n):
            best = [a for a in range(4) if q[a, s] >= q[:, s].max() - 1e-12]
            for kk in range(k - 2, -1, -1):
                if len(best) == 1:
                    break
                qq = [t[a, s] @ value[kk] for a in best]
                best = [a for a, v in zip(best, qq) if v >= max(qq) - 1e-12]
            pi[k, s] = best[0]
    return pi


def demonstrated_turns(t, pi, s, left, per_turn, ends):
    """{action sequence: probability} of the expert's answers for one turn from (s, left)."""
    out = {}

    def go(s, left, seq, p):
        if len(seq) == per_turn or left == 0 or s in ends:
            out[tuple(seq)] = out.get(tuple(seq), 0.0) + p
            return
        a = pi[left, s]
        for s2 in np.nonzero(t[a, s])[0]:
            go(s2, left - 1, seq + [a], p * t[a, s, s2])

    go(s, left, [], 1.0)
    return out


def greedy_decoded(dist):
    """The one sequence a move-by-move argmax (or stop) over `dist` emits."""
    prefix = ()
    while True:
        ext, stop = {}, 0.0
        for seq, p in dist.items():
            if seq[: len(prefix)] != prefix:
                continue
            if len(seq) == len(prefix):
                stop += p
            else:
                ext[seq[len(prefix)]] = ext.get(seq[len(prefix)], 0.0) + p
        if not ext or stop >= max(ext.values()):
            return {prefix: 1.0}
        prefix += (max(ext, key=ext.get),)


def imitator(t, pi, start, win, turns, per_turn, greedy):
    """P(goal) of the imitator described in the module's docstring; `pi` from `expert_tables`."""
    n = t.shape[1]
    value = np.zeros((BUDGET + 1, n))
    value[:, win] = 1
    for _ in range(turns):
        new = value.copy()
        for left in range(1, BUDGET + 1):
            for s in range(n - 2):
                dist = demonstrated_turns(t, pi, s, left, per_turn, (win, n - 1))
                if greedy:
                    dist = greedy_decoded(dist)
                v = 0.0
                for seq, q in dist.items():
                    m = np.eye(n)[s]
                    for a in seq:
                        m = m @ t[a]
                    v += q * m @ value[left - len(seq)]
                new[left, s] = v
        value = new
    return value[BUDGET, start]


def mean_and_se(rates):
    r = np.array(rates)
    return f"{r.mean():.3f} (s.e. over maps {r.std(ddof=1) / np.sqrt(len(r)):.3f})"


def main(path):
    layouts = [(10, 1), (5, 2), (2, 5), (1, 5)]
    rates = {layout: [] for layout in layouts}
    imitated = {(layout, greedy): [] for layout in [(2, 5), (5, 2)] for greedy in (False, True)}
    seeds = []
    for seed, grid in maps(path):
        seeds.append(seed)
        t, start, win = transitions(grid)
        for turns, per_turn in layouts:
            rates[(turns, per_turn)].append(turn_ceiling(t, start, win, turns, per_turn))
        pi = expert_tables(t, win)
        for (layout, greedy), r in imitated.items():
            r.append(imitator(t, pi, start, win, *layout, greedy))
    print(f"{len(seeds)} maps (seeds {min(seeds)}..{max(seeds)}), at most {BUDGET} actions")
    for (turns, per_turn), r in rates.items():
        print(f"{turns} turns x {per_turn} actions: {mean_and_se(r)}")
    for ((turns, per_turn), greedy), r in imitated.items():
        print(f"imitating the demonstrations, {turns} turns x {per_turn} actions, "
              f"{'greedy' if greedy else 'sample'}: {mean_and_se(r)}")


if __name__ == "__main__":
    main(sys.argv[1])
