//! The prompt layout: an env spec and a trajectory's history become chat messages, for the
//! generation prompt and for the training sequence (`docs/ragen-semantics.md` §3 and §5; RAGEN
//! `ragen/llm_agent/ctx_manager.py::get_lm_inputs`).
//!
//! Layout (RAGEN's format, our wording): `system`, then one `user` message holding the env prefix
//! and turn 1; each `assistant` message is a stored (cleaned) response; the following `user`
//! message starts with the `Reward:` of that turn and continues with the next turn's state. The
//! text is rendered with ChatML (`<|im_start|>{role}\n{content}<|im_end|>\n`), which SmolLM2 and
//! Qwen2.5 share.

use crate::config::Config;
use crate::prompt::trace::TokenTrace;
use crate::pyfloat::py_float_repr;
use ragen_gym_core::{EnvSpec, Turn};

/// A chat role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The system prompt.
    System,
    /// Env text.
    User,
    /// Model responses (the only trained segments).
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text.
    pub content: String,
    /// An assistant response sampled under constrained decoding (`docs/ragen-semantics.md` §5): its
    /// tokens are the forced prefix, then exactly the sampled ids, not `content` re-tokenised.
    pub sampled: Option<SampledBody>,
}

impl Message {
    /// A message of plain text.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            sampled: None,
        }
    }
}

/// The exact tokens of an assistant message: the forced prefix (`<think>` or `<answer>`), then
/// the sampled ids.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledBody {
    /// The forced prefix (see [`forced_prefix`]).
    pub forced: &'static str,
    /// The sampled tokens.
    pub trace: TokenTrace,
}

/// What one turn of a trajectory contributes to the context.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnView {
    /// The rendered state shown at the start of the turn.
    pub state: String,
    /// `max_actions_per_traj` minus the actions executed before this turn.
    pub actions_left: usize,
    /// The cleaned response, once the model has answered (the raw text when it was sampled
    /// under constrained decoding).
    pub response: Option<String>,
    /// The response's exact tokens when it was sampled under constrained decoding.
    pub sampled: Option<TokenTrace>,
    /// The turn's reward, once the env has stepped: `Some(None)` prints `0` (no action ran, as
    /// RAGEN's int 0), `Some(Some(r))` prints Python's `repr(r)`.
    pub reward: Option<Option<f64>>,
}

/// Per-run prompt settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptConfig {
    /// The system prompt.
    pub system_prompt: String,
    /// The env prefix from [`env_prefix`].
    pub prefix: String,
    /// Thinking on: the format reminder asks for `<think>` and `<answer>`.
    pub enable_think: bool,
    /// Printed as the max response length (tokens).
    pub response_length: usize,
    /// Keep only the last k turns (-1 or 0 = all; RAGEN `max_context_window`).
    pub max_context_window: i64,
}

impl PromptConfig {
    /// The prompt settings of a run on an env with `spec`.
    pub fn from_config(cfg: &Config, spec: &EnvSpec) -> Self {
        Self {
            system_prompt: cfg.agent_proxy.system_prompt.clone(),
            prefix: env_prefix(
                spec,
                cfg.max_actions_per_traj(spec),
                &cfg.agent_proxy.action_sep,
            ),
            enable_think: cfg.agent_proxy.enable_think,
            response_length: cfg.rollout.response_length,
            max_context_window: cfg.agent_proxy.max_context_window,
        }
    }
}

/// Views of finished turns: each shows its state, its stored answer (with its sampled tokens,
/// when it has them) and its reward. The one bridge from turns to context, for the generation
/// prompt and the training sequence alike.
pub fn turn_views(turns: &[Turn]) -> Vec<TurnView> {
    turns
        .iter()
        .map(|t| TurnView {
            state: t.observation.clone(),
            actions_left: t.actions_left,
            response: Some(t.response.clone()),
            sampled: t.sampled.clone(),
            reward: Some(if t.actions.is_empty() {
                None
            } else {
                Some(t.env_reward)
            }),
        })
        .collect()
}

/// The env prefix (`docs/ragen-semantics.md` §3): instruction, symbol legend, action names and the action budget.
pub fn env_prefix(spec: &EnvSpec, max_actions_per_traj: usize, action_sep: &str) -> String {
    let mut s = spec.instruction.clone();
    if let Some(legend) = spec.symbol_legend.as_ref().filter(|l| !l.is_empty()) {
        s.push_str("\nSymbols used in the state:\n");
        let items: Vec<String> = legend
            .iter()
            .map(|x| format!("{}: {}", x.symbol, x.meaning))
            .collect();
        s.push_str(&items.join(", "));
    }
    if let Some(names) = spec.action_names.as_ref().filter(|n| !n.is_empty()) {
        s.push_str("\nActions you can take:\n");
        s.push_str(&names.join(", "));
        s.push_str(&format!(
            "\nYou may take up to {max_actions_per_traj} actions, separated by the separator \" {action_sep} \"\n"
        ));
    }
    s
}

fn format_reminder(enable_think: bool) -> &'static str {
    if enable_think {
        "<think> [your reasoning] </think> <answer> [your answer] </answer>"
    } else {
        "<answer> [your answer] </answer>"
    }
}

/// Render the text of one turn header and state (`Turn k:` / `State:` ...).
fn turn_text(cfg: &PromptConfig, idx: usize, t: &TurnView) -> String {
    format!(
        "\nTurn {idx}:\nState:\n{}\nActions left: {}. Reply only in the form {} and nothing else. \
         Max response length: {} tokens.\n",
        t.state,
        t.actions_left,
        format_reminder(cfg.enable_think),
        cfg.response_length
    )
}

/// Build the messages for `turns` (`docs/ragen-semantics.md` §3). Turns with a response add an assistant message;
/// a reward on a turn opens the next user message with `Reward:`. With
/// `max_context_window = k > 0` only the last k turns are shown (RAGEN keeps the prefix).
pub fn build_messages(cfg: &PromptConfig, turns: &[TurnView]) -> Vec<Message> {
    let start = match cfg.max_context_window {
        k if k > 0 && (k as usize) < turns.len() => turns.len() - k as usize,
        _ => 0,
    };
    let mut msgs = vec![Message::text(Role::System, cfg.system_prompt.clone())];
    let mut user = cfg.prefix.clone();
    for (i, t) in turns.iter().enumerate().skip(start) {
        user.push_str(&turn_text(cfg, i + 1, t));
        if let Some(resp) = &t.response {
            msgs.push(Message::text(Role::User, std::mem::take(&mut user)));
            msgs.push(Message {
                role: Role::Assistant,
                content: resp.clone(),
                sampled: t.sampled.clone().map(|trace| SampledBody {
                    forced: forced_prefix(cfg.enable_think),
                    trace,
                }),
            });
            if let Some(r) = t.reward {
                let r = r.map_or_else(|| "0".to_string(), py_float_repr);
                user = format!("Reward:\n{r}\n");
            }
        }
    }
    if !user.is_empty() {
        msgs.push(Message::text(Role::User, user));
    }
    msgs
}

/// One ChatML segment: `<|im_start|>{role}\n{content}<|im_end|>\n`.
pub fn chatml_segment(m: &Message) -> String {
    format!("<|im_start|>{}\n{}<|im_end|>\n", m.role.as_str(), m.content)
}

/// The text forced after the generation prompt's `<|im_start|>assistant\n` (`<think>`, or
/// `<answer>` when thinking is off) and prepended to the decoded output before parsing.
pub fn forced_prefix(enable_think: bool) -> &'static str {
    if enable_think { "<think>" } else { "<answer>" }
}

/// The training conversation (`docs/ragen-semantics.md` §5): every answered turn, ending with the last assistant
/// message (the final reward and the post-episode state are dropped).
pub fn training_messages(cfg: &PromptConfig, turns: &[TurnView]) -> Vec<Message> {
    let n = turns.iter().take_while(|t| t.response.is_some()).count();
    let mut answered: Vec<TurnView> = turns[..n].to_vec();
    if let Some(last) = answered.last_mut() {
        last.reward = None;
    }
    build_messages(cfg, &answered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_core::Symbol;

    fn spec() -> EnvSpec {
        EnvSpec {
            id: "ragen/Sokoban-v0".into(),
            version: "0.1.0".into(),
            description: "d".into(),
            instruction: "Push the box.".into(),
            action_names: Some(vec!["Up".into(), "Down".into()]),
            symbol_legend: Some(vec![
                Symbol {
                    symbol: "#".into(),
                    meaning: "wall".into(),
                },
                Symbol {
                    symbol: "P".into(),
                    meaning: "player".into(),
                },
            ]),
            max_episode_steps: 10,
            reward_threshold: None,
            default_config: "{}".into(),
        }
    }

    fn cfg() -> PromptConfig {
        PromptConfig {
            system_prompt: "You are a helpful assistant.".into(),
            prefix: env_prefix(&spec(), 10, "||"),
            enable_think: true,
            response_length: 100,
            max_context_window: -1,
        }
    }

    #[test]
    fn prefix_has_instruction_legend_actions_budget() {
        assert_eq!(
            env_prefix(&spec(), 10, "||"),
            "Push the box.\nSymbols used in the state:\n#: wall, P: player\nActions you can take:\nUp, Down\n\
             You may take up to 10 actions, separated by the separator \" || \"\n"
        );
    }

    #[test]
    fn two_turn_layout_alternates_and_prints_python_floats() {
        let turns = vec![
            TurnView {
                state: "#P#".into(),
                actions_left: 10,
                response: Some("<think>a</think><answer>Up</answer>".into()),
                sampled: None,
                reward: Some(Some(-0.1 + -0.1 + -0.1)),
            },
            TurnView {
                state: "##P".into(),
                actions_left: 7,
                response: None,
                sampled: None,
                reward: None,
            },
        ];
        let m = build_messages(&cfg(), &turns);
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![Role::System, Role::User, Role::Assistant, Role::User]
        );
        assert!(m[1].content.starts_with("Push the box."));
        assert!(m[1].content.ends_with(
            "\nTurn 1:\nState:\n#P#\nActions left: 10. Reply only in the form <think> [your reasoning] </think> \
             <answer> [your answer] </answer> and nothing else. Max response length: 100 tokens.\n"
        ));
        assert!(m[3].content.starts_with(
            "Reward:\n-0.30000000000000004\n\nTurn 2:\nState:\n##P\nActions left: 7."
        ));
        let tok = crate::prompt::CharTokenizer;
        let p = crate::prompt::CharTokenizer::decode(
            &crate::prompt::Tokenize::encode_prompt(&tok, &m, forced_prefix(true)).unwrap(),
        );
        assert!(p.starts_with(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        ));
        assert!(p.ends_with("tokens.\n<|im_end|>\n<|im_start|>assistant\n<think>"));
        assert_eq!(forced_prefix(false), "<answer>");
    }

    #[test]
    fn training_sequence_ends_with_last_assistant() {
        let turns = vec![
            TurnView {
                state: "s1".into(),
                actions_left: 10,
                response: Some("r1".into()),
                sampled: None,
                reward: Some(None),
            },
            TurnView {
                state: "s2".into(),
                actions_left: 10,
                response: Some("r2".into()),
                sampled: None,
                reward: Some(Some(1.0)),
            },
        ];
        let segs: Vec<(String, bool)> = training_messages(&cfg(), &turns)
            .iter()
            .map(|m| (chatml_segment(m), m.role == Role::Assistant))
            .collect();
        let flags: Vec<bool> = segs.iter().map(|s| s.1).collect();
        assert_eq!(flags, vec![false, false, true, false, true]);
        assert_eq!(segs[2].0, "<|im_start|>assistant\nr1<|im_end|>\n");
        // the first turn ran no action: its reward prints as the int 0
        assert!(
            segs[3]
                .0
                .starts_with("<|im_start|>user\nReward:\n0\n\nTurn 2:")
        );
        assert_eq!(segs[4].0, "<|im_start|>assistant\nr2<|im_end|>\n");
    }

    #[test]
    fn context_window_keeps_last_turns() {
        let mut c = cfg();
        c.max_context_window = 1;
        let turns = vec![
            TurnView {
                state: "s1".into(),
                actions_left: 10,
                response: Some("r1".into()),
                sampled: None,
                reward: Some(Some(0.5)),
            },
            TurnView {
                state: "s2".into(),
                actions_left: 9,
                response: None,
                sampled: None,
                reward: None,
            },
        ];
        let m = build_messages(&c, &turns);
        assert_eq!(m.len(), 2);
        assert!(m[1].content.contains("Turn 2:") && !m[1].content.contains("Turn 1:"));
    }
}
