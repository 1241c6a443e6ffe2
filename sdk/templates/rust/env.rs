use ragen_gym_sdk::{Advice, EnvError, EnvSpec, Environment, ExpertInfo, ResetResult, StepResult};

/// Guess a number in 0..4 in three tries; the seed picks it.
pub struct {{class}} { target: u64 }
impl Environment for {{class}} {
    const ID: &'static str = "{{id}}";
    type Config = ();
    fn spec(_: &()) -> EnvSpec {
        EnvSpec::new("Answer with one of 0, 1, 2, 3.").actions(["0", "1", "2", "3"]).max_steps(3)
    }
    fn new(_: ()) -> Result<Self, EnvError> { Ok({{class}} { target: 0 }) }
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        self.target = seed % 4;
        Ok("I picked a number in 0..4.".into())
    }
    fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let Ok(guess @ 0..4) = action.trim().parse::<u64>() else { return Ok(StepResult::invalid("Answer 0, 1, 2 or 3.")) };
        let hit = guess == self.target;
        let text = if hit { "Correct!" } else { "Wrong, guess again." };
        Ok(StepResult::new(text).reward(f64::from(u8::from(hit))).terminated(hit).success(hit))
    }
    fn expert_info(_: &()) -> Option<ExpertInfo> { Some(ExpertInfo { description: "the number itself".into(), optimal: true }) }
    fn expert(&mut self) -> Result<Advice, EnvError> { Ok(Advice::one(self.target.to_string(), Some(1.0))) }
}
ragen_gym_sdk::export_env!({{class}});
