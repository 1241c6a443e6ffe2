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

use crate::prompt::{PromptConfig, Role, Tokenize, TokenizeError, training_messages, turn_views};
use ragen_gym_core::Trajectory;

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
    /// Env group.
    pub group: usize,
    /// Index of the trajectory in the rollout.
    pub index: usize,
}

impl TrainSample {
    /// Number of trained positions.
    pub fn response_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|m| **m > 0.0).count()
    }
}

/// Build the sample of one trajectory. `score` is the (possibly normalised) trajectory score.
/// With `use_turn_scores`, each turn's env reward goes on the position predicting that assistant
/// segment's last token (RAGEN: the `\n` after `<|im_end|>`), and `score - sum(turn rewards)`
/// (penalty, reward functions, normalisation shift) on the last position. Returns `None` when
/// the trajectory has no answered turn (nothing to train on).
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
    let messages = training_messages(prompt, &turn_views(&traj.turns));
    let mut ids = Vec::new();
    let mut assistant = Vec::new();
    let mut ends = Vec::new();
    for m in &messages {
        let is_assistant = m.role == Role::Assistant;
        let t = tok.encode_message(m)?;
        assistant.extend(std::iter::repeat_n(is_assistant, t.len()));
        ids.extend(t);
        if is_assistant {
            ends.push(ids.len());
        }
    }
    let l = ids.len();
    if l < 2 {
        return Ok(None);
    }
    let loss_mask: Vec<f32> = assistant[..l - 1]
        .iter()
        .map(|a| if *a { 1.0 } else { 0.0 })
        .collect();
    let mut token_rewards = vec![0.0f32; l - 1];
    if use_turn_scores {
        let mut turn_sum = 0.0;
        for (turn, end) in traj.turns.iter().zip(&ends) {
            token_rewards[end.saturating_sub(2).min(l - 2)] += turn.env_reward as f32;
            turn_sum += turn.env_reward;
        }
        token_rewards[l - 2] += (score - turn_sum) as f32;
    } else {
        token_rewards[l - 2] = score as f32;
    }
    Ok(Some(TrainSample {
        input_ids: ids,
        loss_mask,
        token_rewards,
        group: traj.group,
        index,
    }))
}

/// The training samples of one rollout: every trajectory of a `kept_groups` group that has a
/// trained token, in rollout order. Also returns the response length (trained tokens) of every
/// trajectory with a sample, kept or not, for `train/response_length`.
pub fn build_batch(
    tok: &dyn Tokenize,
    prompt: &PromptConfig,
    trajs: &[Trajectory],
    scores: &[f64],
    kept_groups: &[usize],
    use_turn_scores: bool,
) -> Result<(Vec<TrainSample>, Vec<f64>), TokenizeError> {
    let mut samples = Vec::new();
    let mut lens = Vec::new();
    for (i, (t, score)) in trajs.iter().zip(scores).enumerate() {
        if let Some(s) = build_sample(tok, prompt, t, i, *score, use_turn_scores)? {
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
    /// position `t - 1` is trained.
    pub fn token_batch(samples: &[&TrainSample], pad_id: u32) -> pol::Result<pol::TokenBatch> {
        let seqs: Vec<(Vec<u32>, Vec<u8>)> = samples
            .iter()
            .map(|s| {
                let mut lm = vec![0u8];
                lm.extend(s.loss_mask.iter().map(|m| u8::from(*m > 0.0)));
                (s.input_ids.clone(), lm)
            })
            .collect();
        pol::TokenBatch::right_padded(&seqs, pad_id)
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
    use crate::prompt::CharTokenizer;
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
    fn empty_trajectory_has_no_sample() {
        let t = traj(vec![]);
        assert!(
            build_sample(&CHAR_TOK, &prompt(), &t, 0, 0.0, false)
                .unwrap()
                .is_none()
        );
    }
}
