use ragen_gym_sdk::{RewardBreakdown, RewardFunction, Trajectory};

/// Penalise long responses: -0.001 per byte the model wrote.
pub struct {{class}};

impl RewardFunction for {{class}} {
    const ID: &'static str = "{{id}}";
    fn score(t: &Trajectory) -> Result<RewardBreakdown, String> {
        let bytes: usize = t.turns.iter().map(|u| u.response.len()).sum();
        Ok(RewardBreakdown::from_components([("length", -0.001 * bytes as f64)]))
    }
}
ragen_gym_sdk::export_reward!({{class}});
