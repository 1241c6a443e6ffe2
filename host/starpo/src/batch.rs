//! Trajectories -> training samples: one token sequence per trajectory, the assistant-only loss
//! mask and the token-level rewards (`docs/ragen-semantics.md` §5; RAGEN
//! `ragen/llm_agent/ctx_manager.py::get_masks_and_scores`), and the padding of samples into
//! tensors for the model.
//!
//! Positions: for a sequence of `L` tokens, response position `j` (0..L-1) predicts token `j+1`.
//! A token is *assistant* when it lies in an assistant ChatML segment (from its `<|im_start|>` to
//! its trailing `\n`). RAGEN's mask is `assistant[:-1]` over `input_ids[1:]`, so position `j` is
//! trained when token `j` is an assistant token: the targets run from the `assistant` role token
//! through the next `<|im_start|>`.
//!
//! Responses sampled under constrained decoding (`docs/ragen-semantics.md` §5, "Constrained action
//! decoding") are kept as their exact tokens, and only the tokens the policy chose are trained:
//! position `j` is trained when token `j + 1` was sampled freely or as a constrained choice. Forced
//! tokens (the ones the grammar or the host fixed, the role header and forced prefix included) are
//! left out of the loss mask: their probability under the constrained policy is 1, so the PPO ratio
//! is exactly 1 and the gradient exactly 0 there, and counting them in verl's token-mean would only
//! shrink every real decision's weight by the number of forced tokens around it, more for longer
//! action names (the length bias that TWOSOME, arXiv 2401.14151 §4.2, normalises away).

use crate::prompt::{
    Message, PromptConfig, Role, TokenOrigin, Tokenize, TokenizeError, encode_sampled,
    training_messages, turn_views,
};
use ragen_gym_core::Trajectory;
use std::sync::Arc;

/// One training sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSample {
    /// Token ids, length `L`.
    pub input_ids: Vec<u32>,
    /// Loss mask per response position, length `L - 1`.
    pub loss_mask: Vec<f32>,
    /// Reward per response position, length `L - 1` (trajectory score on the last position, or
    /// turn rewards on each turn's last position with `use_turn_scores`).
    pub token_rewards: Vec<f32>,
    /// Trained positions whose target was a constrained choice, with its allowed set: the scorer
    /// normalises them over that set (constrained decoding). Sorted by position.
    pub choices: Vec<(usize, Arc<[u32]>)>,
    /// The sampler's log-prob per response position, when the responses were sampled under
    /// constrained decoding (the trainer checks its old log-probs against it); else empty.
    pub rollout_logp: Vec<f32>,
    /// Env group.
    pub group: usize,
    /// Index of the trajectory in the rollout.
    pub index: usize,
    /// Each turn's state, reward and response positions, in order (GiGPO's steps).
    pub turns: Vec<TurnStep>,
}

/// One turn of a sample as GiGPO's step level sees it (`crate::gigpo`).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStep {
    /// The response positions of the turn's assistant segment: from the one predicting its first
    /// token to the one predicting the token after it, cut to the sample's positions. Whatever
    /// the loss mask trains of the turn lies inside.
    pub positions: std::ops::Range<usize>,
    /// The observation the turn answered (the anchor state).
    pub anchor: String,
    /// The turn's reward: its env reward, its share of the format penalty (unless
    /// `use_turn_scores` leaves the penalty out) and, on the last turn, the reward functions'
    /// score; the turns' rewards add up to the trajectory's raw score.
    pub reward: f64,
}

impl TrainSample {
    /// Number of trained positions.
    pub fn response_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|m| **m > 0.0).count()
    }

    /// The sample of a branch ([`crate::rollout::branch`]) whose first `shared` turns are copies
    /// of its parent's: their positions leave the loss mask and their steps the step list, so the
    /// parent alone trains them and GiGPO's step groups count them once. The score and token
    /// rewards stay the whole trajectory's.
    pub fn without_shared_turns(mut self, shared: usize) -> Self {
        if shared == 0 {
            return self;
        }
        let start = self
            .turns
            .get(shared)
            .map_or(self.loss_mask.len(), |t| t.positions.start);
        self.loss_mask[..start].fill(0.0);
        self.choices.retain(|(j, _)| *j >= start);
        self.turns.drain(..shared.min(self.turns.len()));
        self
    }
}

/// Build the sample of one trajectory. `score` is the (possibly normalised) trajectory score.
/// With `use_turn_scores`, each turn's env reward goes on the position predicting that assistant
/// segment's last token (RAGEN: the `\n` after `<|im_end|>`), and `score - sum(turn rewards)`
/// (reward functions) on the last position. A turn sampled under constrained decoding
/// contributes its exact tokens ([`ragen_gym_core::Turn::sampled`]); others RAGEN's
/// re-tokenised text. Returns `None` when the trajectory has no answered turn (nothing to train
/// on).
pub fn build_sample(
    tok: &dyn Tokenize,
    prompt: &PromptConfig,
    traj: &Trajectory,
    index: usize,
    score: f64,
    use_turn_scores: bool,
) -> Result<Option<TrainSample>, TokenizeError> {
    if traj.turns.is_empty() {
        return Ok(None);
    }
    let seq = Sequence::encode(tok, &training_messages(prompt, &turn_views(&traj.turns)))?;
    let l = seq.ids.len();
    if l < 2 {
        return Ok(None);
    }
    let trained = if traj.turns.iter().any(|t| t.sampled.is_some()) {
        seq.chosen_positions()
    } else {
        seq.assistant_positions()
    };
    let mut token_rewards = vec![0.0f32; l - 1];
    if use_turn_scores {
        let mut turn_sum = 0.0;
        for (turn, end) in traj.turns.iter().zip(&seq.ends) {
            token_rewards[end.saturating_sub(2).min(l - 2)] += turn.env_reward as f32;
            turn_sum += turn.env_reward;
        }
        token_rewards[l - 2] += (score - turn_sum) as f32;
    } else {
        token_rewards[l - 2] = score as f32;
    }
    let turns = turn_steps(traj, &seq, use_turn_scores);
    Ok(Some(TrainSample {
        input_ids: seq.ids,
        loss_mask: trained.loss_mask,
        token_rewards,
        choices: trained.choices,
        rollout_logp: trained.rollout_logp,
        group: traj.group,
        index,
        turns,
    }))
}

/// The [`TurnStep`]s of `traj` encoded as `seq`. An assistant segment of tokens `[s, e)` is
/// trained at positions `s..e` (RAGEN's mask) or `s - 1..e - 1` (the chosen tokens), so the turn
/// spans `s - 1..e`; the user message between two turns keeps the spans apart.
fn turn_steps(traj: &Trajectory, seq: &Sequence, use_turn_scores: bool) -> Vec<TurnStep> {
    let positions = seq.ids.len() - 1;
    let last = traj.turns.len() - 1;
    let penalised = traj.turns.iter().filter(|t| t.format_penalty).count();
    let penalty = if use_turn_scores { 0.0 } else { traj.penalty };
    // The penalty is shared by the turns that drew it (all on the last turn if none is marked).
    let penalty_of = |i: usize, t: &ragen_gym_core::Turn| match penalised {
        0 if i == last => penalty,
        0 => 0.0,
        n if t.format_penalty => penalty / n as f64,
        _ => 0.0,
    };
    traj.turns
        .iter()
        .zip(seq.starts.iter().zip(&seq.ends))
        .enumerate()
        .map(|(i, (t, (s, e)))| TurnStep {
            positions: s.saturating_sub(1)..(*e).min(positions),
            anchor: t.observation.clone(),
            reward: t.env_reward
                + penalty_of(i, t)
                + if i == last { traj.extra_reward } else { 0.0 },
        })
        .collect()
}

/// Which positions of a sequence are trained, as [`TrainSample`] holds them.
struct Trained {
    loss_mask: Vec<f32>,
    choices: Vec<(usize, Arc<[u32]>)>,
    rollout_logp: Vec<f32>,
}

/// A training conversation as tokens, with what each token is.
struct Sequence {
    ids: Vec<u32>,
    /// Whether each token lies in an assistant segment.
    assistant: Vec<bool>,
    /// The origin and sampler log-prob of each token of a sampled response (None elsewhere).
    origins: Vec<Option<(TokenOrigin, f32)>>,
    /// The start (token index) of each assistant segment.
    starts: Vec<usize>,
    /// The end (exclusive token index) of each assistant segment.
    ends: Vec<usize>,
}

impl Sequence {
    /// Encode `messages`; a sampled response contributes its exact tokens.
    fn encode(tok: &dyn Tokenize, messages: &[Message]) -> Result<Self, TokenizeError> {
        let mut seq = Sequence {
            ids: Vec::new(),
            assistant: Vec::new(),
            origins: Vec::new(),
            starts: Vec::new(),
            ends: Vec::new(),
        };
        for m in messages {
            let is_assistant = m.role == Role::Assistant;
            let (t, o) = match &m.sampled {
                Some(body) => {
                    let seg = encode_sampled(tok, body)?;
                    (seg.ids, seg.tokens.into_iter().map(Some).collect())
                }
                None => {
                    let t = tok.encode_message(m)?;
                    let n = t.len();
                    (t, vec![None; n])
                }
            };
            seq.assistant
                .extend(std::iter::repeat_n(is_assistant, t.len()));
            seq.origins.extend(o);
            if is_assistant {
                seq.starts.push(seq.ids.len());
            }
            seq.ids.extend(t);
            if is_assistant {
                seq.ends.push(seq.ids.len());
            }
        }
        Ok(seq)
    }

    /// RAGEN's loss mask: position `j` is trained when token `j` is an assistant token.
    fn assistant_positions(&self) -> Trained {
        let l = self.ids.len();
        Trained {
            loss_mask: (0..l - 1)
                .map(|j| if self.assistant[j] { 1.0 } else { 0.0 })
                .collect(),
            choices: Vec::new(),
            rollout_logp: Vec::new(),
        }
    }

    /// Under constrained decoding: the loss mask of the positions whose target the policy chose
    /// (free or a constrained choice), the constrained choices with their allowed sets, and the
    /// sampler's log-prob per position (0 where nothing was sampled).
    fn chosen_positions(&self) -> Trained {
        let l = self.ids.len();
        let mut choices = Vec::new();
        let loss_mask = (0..l - 1)
            .map(|j| {
                let trained = match &self.origins[j + 1] {
                    Some((TokenOrigin::Choice(set), _)) => {
                        choices.push((j, set.clone()));
                        true
                    }
                    Some((o, _)) => o.is_chosen(),
                    None => false,
                };
                if trained { 1.0 } else { 0.0 }
            })
            .collect();
        let rollout_logp = self.origins[1..]
            .iter()
            .map(|o| o.as_ref().map_or(0.0, |(_, lp)| *lp))
            .collect();
        Trained {
            loss_mask,
            choices,
            rollout_logp,
        }
    }
}

/// The training samples of one rollout: every trajectory of a `kept_groups` group that has a
/// trained token, in rollout order. `shared_turns[i]` (0 past its end) is the number of turns
/// trajectory `i` copied from a parent it branched from ([`TrainSample::without_shared_turns`]).
/// Also returns the response length (trained tokens) of every trajectory with a sample, kept or
/// not, for `train/response_length`.
pub fn build_batch(
    tok: &dyn Tokenize,
    prompt: &PromptConfig,
    trajs: &[Trajectory],
    scores: &[f64],
    kept_groups: &[usize],
    use_turn_scores: bool,
    shared_turns: &[usize],
) -> Result<(Vec<TrainSample>, Vec<f64>), TokenizeError> {
    let mut samples = Vec::new();
    let mut lens = Vec::new();
    for (i, (t, score)) in trajs.iter().zip(scores).enumerate() {
        let shared = shared_turns.get(i).copied().unwrap_or(0);
        if let Some(s) = build_sample(tok, prompt, t, i, *score, use_turn_scores)? {
            let s = s.without_shared_turns(shared);
            lens.push(s.response_tokens() as f64);
            if kept_groups.contains(&t.group) && s.response_tokens() > 0 {
                samples.push(s);
            }
        }
    }
    Ok((samples, lens))
}

/// Samples as model input: right-padded token batches and per-position rows as tensors.
#[cfg(feature = "trainer")]
pub mod tensors {
    use super::TrainSample;
    use ragen_gym_policy::{self as pol, Device, Tensor};

    /// Right-padded token batch of samples; the policy's loss mask marks token `t` when response
    /// position `t - 1` is trained, and constrained choices are normalised over their allowed
    /// sets (`docs/ragen-semantics.md` §5, "Constrained action decoding").
    pub fn token_batch(samples: &[&TrainSample], pad_id: u32) -> pol::Result<pol::TokenBatch> {
        let seqs: Vec<(Vec<u32>, Vec<u8>)> = samples
            .iter()
            .map(|s| {
                let mut lm = vec![0u8];
                lm.extend(s.loss_mask.iter().map(|m| u8::from(*m > 0.0)));
                (s.input_ids.clone(), lm)
            })
            .collect();
        let batch = pol::TokenBatch::right_padded(&seqs, pad_id)?;
        if samples.iter().all(|s| s.choices.is_empty()) {
            return Ok(batch);
        }
        let kinds = samples
            .iter()
            .map(|s| {
                let mut k = vec![pol::TokenKind::Free; s.input_ids.len()];
                for (j, set) in &s.choices {
                    k[j + 1] = pol::TokenKind::Choice(set.clone());
                }
                k
            })
            .collect();
        batch.with_constraints(kinds)
    }

    /// Per-sample rows (one value per response position) as a zero-padded `[B, width]` tensor.
    pub fn pad_rows(rows: &[&[f32]], width: usize, device: &Device) -> pol::Result<Tensor> {
        let mut flat = Vec::with_capacity(rows.len() * width);
        for r in rows {
            flat.extend_from_slice(&r[..r.len().min(width)]);
            flat.extend(std::iter::repeat_n(0.0, width.saturating_sub(r.len())));
        }
        Ok(Tensor::from_vec(flat, (rows.len(), width), device)?)
    }

    /// A `[B, T]` tensor back to per-sample rows, each cut to its sample's `L - 1` positions.
    pub fn rows_of(t: &Tensor, samples: &[&TrainSample]) -> pol::Result<Vec<Vec<f32>>> {
        let rows: Vec<Vec<f32>> = t.to_vec2()?;
        Ok(rows
            .into_iter()
            .zip(samples)
            .map(|(mut r, s)| {
                r.truncate(s.loss_mask.len());
                r
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{CharTokenizer, TokenTrace};
    use ragen_gym_core::Turn;

    const CHAR_TOK: CharTokenizer = CharTokenizer;

    fn seg_lens(t: &Trajectory) -> (Vec<bool>, Vec<usize>) {
        let msgs = training_messages(&prompt(), &turn_views(&t.turns));
        (
            msgs.iter().map(|m| m.role == Role::Assistant).collect(),
            msgs.iter()
                .map(|m| CHAR_TOK.encode_message(m).unwrap().len())
                .collect(),
        )
    }

    fn turn(resp: &str, r: f64) -> Turn {
        Turn {
            observation: "s".into(),
            actions_left: 1,
            response: resp.into(),
            think: None,
            answer: None,
            actions: vec!["a".into()],
            env_reward: r,
            action_is_valid: true,
            action_is_effective: true,
            format_penalty: false,
            info: vec![],
            steps: vec![],
            sampled: None,
        }
    }

    fn traj(turns: Vec<Turn>) -> Trajectory {
        Trajectory {
            env_id: "x/Y-v0".into(),
            tag: "Y".into(),
            group: 3,
            seed: 7,
            turns,
            final_observation: String::new(),
            num_actions: 2,
            terminated: true,
            truncated: false,
            success: true,
            penalty: -0.1,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    fn prompt() -> PromptConfig {
        PromptConfig {
            system_prompt: "S".into(),
            prefix: "P".into(),
            enable_think: true,
            response_length: 9,
            max_context_window: -1,
        }
    }

    #[test]
    fn mask_covers_assistant_targets_shifted_by_one() {
        let t = traj(vec![turn("ab", 1.0), turn("c", 2.0)]);
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, t.score(), false)
            .unwrap()
            .unwrap();
        let (flags, lens) = seg_lens(&t);
        // segments: system, user, assistant(ab), user, assistant(c)
        assert_eq!(flags, vec![false, false, true, false, true]);
        let a0 = lens[0] + lens[1];
        let a1 = a0 + lens[2] + lens[3];
        let l = s.input_ids.len();
        assert_eq!(l, a1 + lens[4]);
        // assistant segment "<|im_start|>assistant\nab<|im_end|>\n" is 1 + 10 + 2 + 1 + 1 = 15 tokens
        assert_eq!(lens[2], 15);
        for j in 0..l - 1 {
            let want = (a0..a0 + lens[2]).contains(&j) || (a1..l).contains(&j);
            assert_eq!(s.loss_mask[j] > 0.0, want, "position {j}");
        }
        // the first trained target is the `a` of "assistant"; the target after the first segment
        // is the next user's <|im_start|>
        assert_eq!(s.input_ids[a0 + 1], 'a' as u32);
        assert_eq!(s.input_ids[a0 + lens[2]], 1);
        assert_eq!(s.response_tokens(), lens[2] + lens[4] - 1);
        // score = 1 + 2 - 0.1 on the last position only
        assert!((s.token_rewards[l - 2] - 2.9).abs() < 1e-6);
        assert_eq!(s.token_rewards.iter().filter(|r| **r != 0.0).count(), 1);
        assert_eq!(s.group, 3);
    }

    #[test]
    fn turn_steps_span_each_assistant_segment_and_add_up_to_the_score() {
        // Segments: system, user, assistant(ab), user, assistant(c). Assistant tokens [s, e) are
        // trained at s..e (RAGEN's mask) or s-1..e-1 (chosen tokens): each turn spans s-1..e,
        // cut to the L-1 positions.
        let mut t = traj(vec![turn("ab", 1.0), turn("c", 2.0)]);
        t.turns[0].observation = "s0".into();
        t.turns[1].observation = "s1".into();
        t.turns[1].format_penalty = true;
        t.extra_reward = 0.5;
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, t.score(), false)
            .unwrap()
            .unwrap();
        let (_, lens) = seg_lens(&t);
        let a0 = lens[0] + lens[1];
        let a1 = a0 + lens[2] + lens[3];
        let l = s.input_ids.len();
        let spans: Vec<_> = s.turns.iter().map(|t| t.positions.clone()).collect();
        assert_eq!(spans, vec![a0 - 1..a0 + lens[2], a1 - 1..l - 1]);
        for (j, w) in s.loss_mask.iter().enumerate() {
            if *w > 0.0 {
                assert!(spans.iter().any(|r| r.contains(&j)), "position {j}");
            }
        }
        assert_eq!(s.turns[0].anchor, "s0");
        assert_eq!(s.turns[1].anchor, "s1");
        // turn 0: its env reward 1; turn 1: 2, the penalty -0.1 it drew, the reward functions'
        // 0.5: 2.4. Together the raw score 1 + 2 - 0.1 + 0.5 = 3.4.
        assert_eq!(s.turns[0].reward, 1.0);
        assert!((s.turns[1].reward - 2.4).abs() < 1e-12);
        // with turn scores the penalty stays out, as in the trajectory's raw score
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, t.score(), true)
            .unwrap()
            .unwrap();
        assert!((s.turns[1].reward - 2.5).abs() < 1e-12);
        // a penalty no turn is marked with goes on the last turn
        t.turns[1].format_penalty = false;
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, t.score(), false)
            .unwrap()
            .unwrap();
        assert!((s.turns[1].reward - 2.4).abs() < 1e-12);
    }

    #[test]
    fn turn_scores_go_on_each_turn_end() {
        let t = traj(vec![turn("ab", 1.0), turn("c", 2.0)]);
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, t.score(), true)
            .unwrap()
            .unwrap();
        let (_, lens) = seg_lens(&t);
        let end0 = lens[0] + lens[1] + lens[2];
        let l = s.input_ids.len();
        // position end0 - 2 predicts the "\n" after the first <|im_end|>
        assert_eq!(s.input_ids[end0 - 1], '\n' as u32);
        assert_eq!(s.input_ids[end0 - 2], 2);
        assert!((s.token_rewards[end0 - 2] - 1.0).abs() < 1e-6);
        assert!((s.token_rewards[l - 2] - (2.0 - 0.1)).abs() < 1e-6);
    }

    #[test]
    fn sampled_responses_keep_their_tokens_and_train_only_chosen_ones() {
        // Thinking off, the model chose `U` among {U, D} (allowed set as char ids), the
        // grammar forced `p</answer>` and the end of turn. The sequence holds exactly the sampled
        // ids (here `X` where the stored text says `U`, to show the text is not re-tokenised),
        // and only the position predicting the choice is trained.
        let mut p = prompt();
        p.enable_think = false;
        let mut t = traj(vec![turn("<answer>Up</answer>", 1.0)]);
        let set: Arc<[u32]> = vec!['D' as u32, 'X' as u32].into();
        let ids: Vec<u32> = "Xp</answer>".chars().map(|c| c as u32).collect();
        let mut origins = vec![TokenOrigin::Choice(set.clone())];
        origins.extend(vec![TokenOrigin::Forced; ids.len() - 1]);
        let logprobs = [-0.5]
            .into_iter()
            .chain(std::iter::repeat_n(0.0, ids.len()))
            .collect();
        let trace = TokenTrace {
            ids,
            origins,
            end: Some(TokenOrigin::Forced),
            logprobs,
        };
        t.turns[0].sampled = Some(trace);
        let s = build_sample(&CHAR_TOK, &p, &t, 0, 1.0, false)
            .unwrap()
            .unwrap();
        let text = CharTokenizer::decode(&s.input_ids);
        assert!(
            text.ends_with("<|im_start|>assistant\n<answer>Xp</answer><|im_end|>\n"),
            "{text}"
        );
        let x = s.input_ids.len() - "Xp</answer>".len() - 2;
        assert_eq!(s.input_ids[x], 'X' as u32);
        let trained: Vec<usize> = (0..s.loss_mask.len())
            .filter(|&j| s.loss_mask[j] > 0.0)
            .collect();
        assert_eq!(trained, vec![x - 1]);
        assert_eq!(s.choices, vec![(x - 1, set)]);
        // the sampler's log-prob sits on the position predicting the choice, 0 elsewhere
        assert_eq!(s.rollout_logp[x - 1], -0.5);
        assert_eq!(s.rollout_logp.iter().filter(|x| **x != 0.0).count(), 1);
        // the score still sits on the last position (an untrained one)
        assert_eq!(s.token_rewards[s.input_ids.len() - 2], 1.0);
        // a free end of turn (the model stopped inside its thought) is trained too
        let trace = TokenTrace {
            ids: vec!['a' as u32],
            origins: vec![TokenOrigin::Free],
            end: Some(TokenOrigin::Free),
            logprobs: vec![-1.0, -2.0],
        };
        t.turns[0].sampled = Some(trace);
        let s = build_sample(&CHAR_TOK, &prompt(), &t, 0, 1.0, false)
            .unwrap()
            .unwrap();
        let l = s.input_ids.len();
        assert_eq!(s.input_ids[l - 2], CharTokenizer::IM_END);
        let trained: Vec<usize> = (0..l - 1).filter(|&j| s.loss_mask[j] > 0.0).collect();
        assert_eq!(trained, vec![l - 4, l - 3]);
        assert_eq!(s.input_ids[l - 3], 'a' as u32);
        assert_eq!(s.rollout_logp[l - 4..], [-1.0, -2.0, 0.0]);
        assert!(s.choices.is_empty());
    }

    #[test]
    fn empty_trajectory_has_no_sample() {
        let t = traj(vec![]);
        assert!(
            build_sample(&CHAR_TOK, &prompt(), &t, 0, 0.0, false)
                .unwrap()
                .is_none()
        );
    }
}
