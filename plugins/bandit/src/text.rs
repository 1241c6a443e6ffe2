//! Prompt and observation text of the Bandit env.

/// Format a reward as Python's `str(float)` does for the values a bandit pays: shortest
/// round-trip digits, with `.0` kept on integral values (`1.0`, `0.0`, `0.1`, `0.15`).
pub fn python_float(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// The first observation: the game and the two arm names in this episode's order.
pub fn reset_observation(first: &str, second: &str) -> String {
    format!(
        "You stand before two slot machines, one called {first} and one called {second}. You may \
         pull one of them, once. Each machine has its own payout distribution, and its name is a \
         hint about how it behaves: think about what the names suggest, then pull the machine you \
         expect to pay more on average. Reply with the machine's name as <answer> NAME </answer>, \
         for example <answer> {first} </answer>."
    )
}

/// The observation after the pull, RAGEN's `"{name}: {reward} points"`.
pub fn step_observation(name: &str, reward: f64) -> String {
    format!("{name}: {} points", python_float(reward))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.0), "0.0");
        assert_eq!(python_float(0.1), "0.1");
        assert_eq!(python_float(0.15), "0.15");
        assert_eq!(python_float(-0.30000000000000004), "-0.30000000000000004");
        assert_eq!(step_observation("Dragon", 1.0), "Dragon: 1.0 points");
    }

    #[test]
    fn reset_text_names_both_arms_in_order() {
        let text = reset_observation("Dragon", "Phoenix");
        let (d, p) = (text.find("Dragon").unwrap(), text.find("Phoenix").unwrap());
        assert!(d < p);
        assert!(text.contains("<answer>"));
    }
}
