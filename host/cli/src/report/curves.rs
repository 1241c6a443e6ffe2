//! The curves a person watches during and after training, RAGEN's paper figures (arXiv
//! 2504.20073 §4: success, reward std, entropy, gradient norm, response length): one list for
//! the progress line and the panels of `ragen-gym plot`.

/// Which metrics a curve shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The metric with this exact name.
    Exact(&'static str),
    /// Every metric whose name ends with this (e.g. `/success` for `train/{tag}/success` and
    /// `val-env/{tag}/success`).
    Suffix(&'static str),
}

impl Pick {
    /// Whether `name` is picked.
    pub fn matches(self, name: &str) -> bool {
        match self {
            Pick::Exact(n) => name == n,
            Pick::Suffix(s) => name.ends_with(s),
        }
    }
}

/// One curve (a panel of the plot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Curve {
    /// The panel's title.
    pub title: &'static str,
    /// The y axis's label.
    pub y_label: &'static str,
    /// The metrics drawn in it, one line each.
    pub picks: &'static [Pick],
    /// Decimals on the progress line.
    pub decimals: usize,
}

impl Curve {
    /// The picked names among `names`, in the order given.
    pub fn series<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        names
            .into_iter()
            .filter(|n| self.picks.iter().any(|p| p.matches(n)))
            .collect()
    }
}

/// The curves, in display order.
pub const CURVES: &[Curve] = &[
    Curve {
        title: "Success rate",
        y_label: "success rate",
        picks: &[Pick::Suffix("/success")],
        decimals: 3,
    },
    Curve {
        title: "In-group reward std",
        y_label: "std of trajectory scores",
        picks: &[
            Pick::Exact("rollout/in_group_std"),
            Pick::Exact("rollout/chosen_in_group_std"),
        ],
        decimals: 4,
    },
    Curve {
        title: "Entropy",
        y_label: "mean token entropy (nats)",
        picks: &[Pick::Exact("actor/entropy_loss")],
        decimals: 4,
    },
    Curve {
        title: "Gradient norm",
        y_label: "L2 norm before clipping",
        picks: &[
            Pick::Exact("actor/grad_norm"),
            Pick::Exact("critic/grad_norm"),
        ],
        decimals: 4,
    },
    Curve {
        title: "Response length",
        y_label: "trained tokens per trajectory",
        picks: &[
            Pick::Exact("train/response_length"),
            Pick::Exact("val-env/response_length"),
        ],
        decimals: 1,
    },
    Curve {
        title: "Trajectory score",
        y_label: "env reward + penalty + reward functions",
        picks: &[Pick::Suffix("/score")],
        decimals: 4,
    },
];

/// Seconds per iteration, shown on the progress line after the curves.
pub const STEP_TIME: &str = "timing_s/step";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_select_ragen_names() {
        let names = [
            "train/Bandit/success",
            "val-env/Bandit/success",
            "train/Bandit/pass@2",
            "critic/score/mean",
            "train/Bandit/score",
            "rollout/in_group_std",
        ];
        assert_eq!(
            CURVES[0].series(names),
            vec!["train/Bandit/success", "val-env/Bandit/success"]
        );
        assert_eq!(CURVES[1].series(names), vec!["rollout/in_group_std"]);
        // `critic/score/mean` is a statistic, not a trajectory score
        assert_eq!(CURVES[5].series(names), vec!["train/Bandit/score"]);
    }
}
