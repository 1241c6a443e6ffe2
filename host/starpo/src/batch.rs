//! Trajectories -> training samples: one token sequence per trajectory, the assistant-only loss
//! mask and the token-level rewards (spec §4.4; RAGEN `ctx_manager.get_masks_and_scores`).
//!
//! Positions: for a sequence of `L` tokens, response position `j` (0..L-1) predicts token `j+1`.
//! A token is *assistant* when it lies in an assistant ChatML segment (from its `<|im_start|>` to
//! its trailing `\n`). RAGEN's mask is `assistant[:-1]` over `input_ids[1:]`, so position `j` is
//! trained when token `j` is an assistant token: the targets run from the `assistant` role token
//! through the next `<|im_start|>`.

use crate::context::{Message, PromptConfig, Role, chatml_segment, training_messages};
use crate::rollout::turn_views;
use ragen_gym_core::Trajectory;

/// Messages -> token ids. Control tokens (`<|im_start|>`, `<|im_end|>`) are inserted by id;
/// message bodies are encoded literally, so env text can never forge a control token.
pub trait Tokenize {
    /// Ids of one ChatML segment `<|im_start|>{role}\n{content}<|im_end|>\n`.
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, String>;
    /// Ids of `<|im_start|>assistant\n{forced}` (the generation prompt's tail).
    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, String>;
    /// Ids of a whole generation prompt.
    fn encode_prompt(&self, messages: &[Message], forced: &str) -> Result<Vec<u32>, String> {
        let mut ids = Vec::new();
        for m in messages {
            ids.extend(self.encode_message(m)?);
        }
        ids.extend(self.encode_assistant_prefix(forced)?);
        Ok(ids)
    }
}

/// A [`Tokenize`] for tests and tools: one id per `char`, control tokens as ids 1 and 2.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharTokenizer;

impl CharTokenizer {
    fn encode_text(text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("<|im_start|>") {
                out.push(1);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("<|im_end|>") {
                out.push(2);
                rest = r;
            } else {
                let c = rest.chars().next().expect("non-empty");
                out.push(c as u32);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }
}

impl Tokenize for CharTokenizer {
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, String> {
        Ok(Self::encode_text(&chatml_segment(message)))
    }
    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, String> {
        Ok(Self::encode_text(&format!(
            "<|im_start|>assistant\n{forced}"
        )))
    }
}

/// One training sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
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

impl Sample {
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
) -> Result<Option<Sample>, String> {
    if traj.turns.is_empty() {
        return Ok(None);
    }
    let messages = training_messages(prompt, &turn_views(traj));
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
    Ok(Some(Sample {
        input_ids: ids,
        loss_mask,
        token_rewards,
        group: traj.group,
        index,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_core::Turn;

    const CHAR_TOK: CharTokenizer = CharTokenizer;

    fn seg_lens(t: &Trajectory) -> (Vec<bool>, Vec<usize>) {
        let msgs = training_messages(&prompt(), &turn_views(t));
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
