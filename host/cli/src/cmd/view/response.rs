//! A model response as the page shows it: plain text, with each action of its `<answer>` marked
//! as executed, invalid (not an action name of the env: the turn drew the format penalty) or not
//! executed (a valid name past the action budget or after the episode ended). The parse follows
//! the trainer's (`ragen_gym_starpo::prompt::parse_response`, `map_actions`): the answer is
//! split on the action separator, trimmed, and matched to the env's names case-insensitively.

use ragen_gym_core::Turn;
use ragen_gym_starpo::prompt::map_actions;
use serde::Serialize;

/// What a piece of a response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Text around the actions.
    Text,
    /// An action the env executed.
    Action,
    /// Not one of the env's actions.
    Invalid,
    /// A valid action that was not executed.
    Unexecuted,
}

/// One piece of a response, `[kind, text]` on the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Part(pub Kind, pub String);

/// The answer's span in `response`: after the last `<answer>` that has a `</answer>` after it
/// (the cleaned response has one answer).
fn answer_span(response: &str) -> Option<(usize, usize)> {
    let start = response.rfind("<answer>")? + "<answer>".len();
    let end = start + response[start..].find("</answer>")?;
    Some((start, end))
}

/// The pieces of `turn`'s response. `names` are the env's action names (`None` for a text-action
/// env: every non-empty piece is an action); `sep` is the action separator.
pub fn parts(turn: &Turn, names: Option<&[String]>, sep: &str) -> Vec<Part> {
    let response = &turn.response;
    let Some((start, end)) = answer_span(response).filter(|_| turn.answer.is_some()) else {
        return vec![Part(Kind::Text, response.clone())];
    };
    let mut out = vec![Part(Kind::Text, response[..start].to_string())];
    let mut executed = turn.actions.iter().peekable();
    let pieces: Vec<&str> = if sep.is_empty() {
        vec![&response[start..end]]
    } else {
        response[start..end].split(sep).collect()
    };
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            out.push(Part(Kind::Text, sep.to_string()));
        }
        let name = piece.trim();
        let (lead, rest) = piece.split_at(piece.find(name).unwrap_or(0));
        let trail = &rest[name.len()..];
        if !lead.is_empty() {
            out.push(Part(Kind::Text, lead.to_string()));
        }
        if !name.is_empty() {
            let (mapped, _) = map_actions(&[name.to_string()], names);
            let kind = match mapped.first() {
                None => Kind::Invalid,
                Some(m) if executed.peek() == Some(&m) => {
                    executed.next();
                    Kind::Action
                }
                Some(_) => Kind::Unexecuted,
            };
            out.push(Part(kind, name.to_string()));
        }
        if !trail.is_empty() {
            out.push(Part(Kind::Text, trail.to_string()));
        }
    }
    out.push(Part(Kind::Text, response[end..].to_string()));
    out.retain(|p| !p.1.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(response: &str, answer: Option<&str>, actions: &[&str]) -> Turn {
        Turn {
            observation: String::new(),
            actions_left: 5,
            response: response.into(),
            think: None,
            answer: answer.map(String::from),
            actions: actions.iter().map(|a| a.to_string()).collect(),
            env_reward: 0.0,
            action_is_valid: true,
            action_is_effective: true,
            format_penalty: false,
            info: vec![],
            steps: vec![],
            sampled: None,
        }
    }

    fn names() -> Vec<String> {
        ["Up", "Down", "Left", "Right"].map(String::from).into()
    }

    fn kinds(p: &[Part]) -> Vec<(Kind, &str)> {
        p.iter().map(|p| (p.0, p.1.as_str())).collect()
    }

    #[test]
    fn actions_are_marked_executed_invalid_or_not_executed() {
        use Kind::*;
        let t = turn(
            "<think>go</think><answer>UP || Jump || Left || Down</answer>",
            Some("UP || Jump || Left || Down"),
            &["Up", "Left"],
        );
        let p = parts(&t, Some(&names()), "||");
        assert_eq!(
            kinds(&p),
            [
                (Text, "<think>go</think><answer>"),
                (Action, "UP"),
                (Text, " "),
                (Text, "||"),
                (Text, " "),
                (Invalid, "Jump"),
                (Text, " "),
                (Text, "||"),
                (Text, " "),
                (Action, "Left"),
                (Text, " "),
                (Text, "||"),
                (Text, " "),
                (Unexecuted, "Down"),
                (Text, "</answer>"),
            ]
        );
        let joined: String = p.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(joined, t.response, "the parts are the whole response");
    }

    #[test]
    fn an_unparsed_response_is_one_text_part() {
        let t = turn("<script>alert(1)</script> Up", None, &[]);
        assert_eq!(
            kinds(&parts(&t, Some(&names()), "||")),
            [(Kind::Text, "<script>alert(1)</script> Up")]
        );
    }

    #[test]
    fn text_action_envs_take_every_piece_as_an_action() {
        let t = turn(
            "<answer>search[red shoes]</answer>",
            Some("search[red shoes]"),
            &["search[red shoes]"],
        );
        assert_eq!(
            kinds(&parts(&t, None, "||"))[1],
            (Kind::Action, "search[red shoes]")
        );
    }
}
