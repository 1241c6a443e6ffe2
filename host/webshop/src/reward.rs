//! The WebShop reward, `web_agent_site/engine/goal.py::get_reward` on upstream `master`
//! (`shared/spec/webshop.md` §2):
//!
//! ```text
//! r = r_type * (n_attr_match + n_opt_match + 1[price <= price_upper])
//!            / (|goal.attributes| + |goal.goal_options| + 1)
//! ```
//!
//! Deviation: product-type nouns come from the catalog (`type_nouns`) instead of spaCy.

use serde::Serialize;

use crate::catalog::{Goal, Product};
use crate::fuzz::token_set_ratio;

/// Score above which two strings match (`fuzz.token_set_ratio(a, b) > 85`, spec §2.3-2.4).
pub const MATCH_THRESHOLD: u32 = 85;

/// The colour words of WebShop's `engine/normalize.py::COLOR_SET`, in its (alphabetical) order.
pub const COLOR_SET: &[&str] = &[
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
];

/// `normalize_color`: the first [`COLOR_SET`] entry that is a substring of `value`, otherwise
/// `value` unchanged (so `washed black` becomes `ash` and `standard` becomes `tan`, spec §2.5).
pub fn normalize_color(value: &str) -> &str {
    COLOR_SET
        .iter()
        .copied()
        .find(|c| value.contains(c))
        .unwrap_or(value)
}

/// The verbose reward breakdown (the text env's `verbose_info`; spec §2.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardBreakdown {
    /// Total reward in `[0, 1]`.
    pub reward: f64,
    /// Product-type gate in `{0, 0.1, 0.5, 1}`.
    pub r_type: f64,
    /// Purchased `query` equals the goal's.
    pub query_match: bool,
    /// At least two common `›`-separated category levels.
    pub category_match: bool,
    /// Share of the goal name's nouns found in the purchased name's nouns.
    pub title_score: f64,
    /// Fraction of goal attributes matched.
    pub r_att: f64,
    /// Weight of the attribute term: `|attrs| / denominator`.
    pub w_att: f64,
    /// Fraction of goal options matched; `None` when the goal has no options.
    pub r_option: Option<f64>,
    /// Weight of the option term: `|opts| / denominator`.
    pub w_option: f64,
    /// 1 when the price is within the budget, else 0.
    pub r_price: f64,
    /// Weight of the price term: `1 / denominator`.
    pub w_price: f64,
    /// Number of goal attributes matched.
    pub n_attr_match: usize,
    /// Number of goal options matched.
    pub n_option_match: usize,
}

/// `get_type_reward` (spec §2.2): `(r_type, query_match, category_match, title_score)`.
///
/// `goal_nouns` is a list: like upstream, duplicates count in the denominator while the
/// intersection is taken over sets.
pub fn type_reward(
    product: &Product,
    goal: &Goal,
    goal_nouns: &[String],
) -> (f64, bool, bool, f64) {
    let query_match = product.query == goal.query;
    let split = |s: &str| -> std::collections::BTreeSet<String> {
        s.split('›').map(|x| x.trim().to_string()).collect()
    };
    let category_match = split(&product.product_category)
        .intersection(&split(&goal.product_category))
        .count()
        >= 2;
    let purchased: std::collections::BTreeSet<String> = product
        .type_nouns
        .iter()
        .map(|n| n.to_lowercase())
        .collect();
    let desired: std::collections::BTreeSet<String> =
        goal_nouns.iter().map(|n| n.to_lowercase()).collect();
    let title_score = if goal_nouns.is_empty() {
        0.2
    } else {
        purchased.intersection(&desired).count() as f64 / goal_nouns.len() as f64
    };
    let mut r_type = 1.0;
    if !(query_match || category_match || title_score > 0.2) {
        r_type = 0.5;
    }
    if title_score < 0.1 {
        r_type = 0.1;
    }
    if title_score == 0.0 {
        r_type = 0.0;
    }
    (r_type, query_match, category_match, title_score)
}

/// `get_attribute_reward` (spec §2.3): a goal attribute matches when some product attribute
/// scores `> 85` against it, or when it is a substring of the lowercased title, the joined
/// bullet points, or the description. Returns the number of matches.
pub fn attribute_matches(product: &Product, goal_attributes: &[String]) -> usize {
    let title = product.name.to_lowercase();
    let bullets = product.bullet_points.join(" ").to_lowercase();
    let description = product.description.to_lowercase();
    goal_attributes
        .iter()
        .filter(|g| {
            product
                .attributes
                .iter()
                .any(|p| token_set_ratio(p, g) > MATCH_THRESHOLD)
                || title.contains(g.as_str())
                || bullets.contains(g.as_str())
                || description.contains(g.as_str())
        })
        .count()
}

/// `get_option_reward` (spec §2.4): both sides through [`normalize_color`]; each goal option
/// counts once when any purchased option value scores `> 85` against it.
pub fn option_matches(purchased_values: &[String], goal_options: &[String]) -> usize {
    let purchased: Vec<&str> = purchased_values
        .iter()
        .map(|o| normalize_color(o))
        .collect();
    goal_options
        .iter()
        .map(|g| normalize_color(g))
        .filter(|g| {
            purchased
                .iter()
                .any(|p| token_set_ratio(p, g) > MATCH_THRESHOLD)
        })
        .count()
}

/// `get_reward`: score buying `product` at `price` with the selected option values
/// `purchased_options` (the values of the session's `{name: value}` selection, in any order)
/// against `goal`, whose name's nouns are `goal_nouns`.
pub fn reward(
    product: &Product,
    price: f64,
    purchased_options: &[String],
    goal: &Goal,
    goal_nouns: &[String],
) -> RewardBreakdown {
    let (r_type, query_match, category_match, title_score) = type_reward(product, goal, goal_nouns);
    let n_attr_match = attribute_matches(product, &goal.attributes);
    let n_option_match = option_matches(purchased_options, &goal.goal_options);
    let r_price = if price <= goal.price_upper { 1.0 } else { 0.0 };
    let n_attr = goal.attributes.len();
    let n_opt = goal.goal_options.len();
    let denominator = (n_attr + n_opt + 1) as f64;
    let total = (n_attr_match + n_option_match) as f64 + r_price;
    RewardBreakdown {
        reward: total / denominator * r_type,
        r_type,
        query_match,
        category_match,
        title_score,
        r_att: if n_attr == 0 {
            0.0
        } else {
            n_attr_match as f64 / n_attr as f64
        },
        w_att: n_attr as f64 / denominator,
        r_option: (n_opt > 0).then(|| n_option_match as f64 / n_opt as f64),
        w_option: n_opt as f64 / denominator,
        r_price,
        w_price: 1.0 / denominator,
        n_attr_match,
        n_option_match,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn goal_for(c: &Catalog, asin: &str, options: &[&str]) -> Goal {
        c.goals
            .iter()
            .find(|g| {
                g.asin == asin
                    && g.goal_options
                        .iter()
                        .map(String::as_str)
                        .eq(options.iter().copied())
            })
            .cloned()
            .expect("goal in the embedded catalog")
    }

    fn buy(c: &Catalog, asin: &str, options: &[&str], goal: &Goal) -> RewardBreakdown {
        let p = c.product(asin).unwrap();
        let opts: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        reward(p, p.price, &opts, goal, &c.goal_nouns(goal))
    }

    #[test]
    fn normalize_color_quirks_of_the_spec() {
        for (v, want) in [
            ("washed black", "ash"),
            ("standard", "tan"),
            ("dark blue", "blue"),
            ("heather grey", "grey"),
            ("rose gold", "gold"),
            ("x-large", "x-large"),
        ] {
            assert_eq!(normalize_color(v), want, "{v}");
        }
    }

    /// Spec §2.5 worked example: attributes [machine wash, cotton spandex], options
    /// [black, large], budget 30; buying the goal product in x-large at $19.99 scores 5/5.
    #[test]
    fn worked_example_x_large_against_large_scores_one() {
        let c = Catalog::embedded();
        let goal = goal_for(&c, "B0WS000001", &["black", "large"]);
        assert_eq!(goal.attributes, ["machine wash", "cotton spandex"]);
        assert_eq!(goal.price_upper, 30.0);
        let b = buy(&c, "B0WS000001", &["black", "x-large"], &goal);
        assert_eq!(b.r_type, 1.0);
        assert_eq!((b.n_attr_match, b.n_option_match, b.r_price), (2, 2, 1.0));
        assert_eq!(b.reward, 1.0);
        // A different size class does not match: medium vs large scores 18.
        let b = buy(&c, "B0WS000001", &["black", "medium"], &goal);
        assert_eq!(b.reward, 4.0 / 5.0);
    }

    #[test]
    fn wrong_noun_purchase_scores_zero() {
        let c = Catalog::embedded();
        let goal = c
            .goals
            .iter()
            .find(|g| g.asin == "B0WS000019")
            .unwrap()
            .clone();
        let opts: Vec<&str> = goal.goal_options.iter().map(String::as_str).collect();
        // The travel mug has the same query, attributes and options but no noun in common.
        let b = buy(&c, "B0WS000020", &opts[..1], &goal);
        assert!(b.query_match);
        assert_eq!(b.title_score, 0.0);
        assert_eq!(b.r_type, 0.0);
        assert_eq!(b.reward, 0.0);
    }

    #[test]
    fn over_budget_twin_loses_exactly_the_price_share() {
        let c = Catalog::embedded();
        let goal = c
            .goals
            .iter()
            .find(|g| g.asin == "B0WS000006")
            .unwrap()
            .clone();
        let opts: Vec<&str> = goal.goal_options.iter().map(String::as_str).collect();
        let right = buy(&c, "B0WS000006", &opts, &goal);
        let twin = buy(&c, "B0WS000007", &opts, &goal);
        let denominator = (goal.attributes.len() + goal.goal_options.len() + 1) as f64;
        assert_eq!(right.reward, 1.0);
        assert_eq!(twin.r_type, 1.0);
        assert_eq!(twin.r_price, 0.0);
        assert!((right.reward - twin.reward - 1.0 / denominator).abs() < 1e-12);
    }

    #[test]
    fn no_options_chosen_loses_the_option_share() {
        let c = Catalog::embedded();
        for goal in &c.goals {
            let opts: Vec<&str> = goal.goal_options.iter().map(String::as_str).collect();
            let full = buy(&c, &goal.asin, &opts, goal);
            let none = buy(&c, &goal.asin, &[], goal);
            assert_eq!(
                full.reward, 1.0,
                "goal product with goal options: {}",
                goal.instruction_text
            );
            let n_attr = goal.attributes.len() as f64;
            let n_opt = goal.goal_options.len() as f64;
            assert!((none.reward - (n_attr + 1.0) / (n_attr + n_opt + 1.0)).abs() < 1e-12);
            assert_eq!(none.r_option, Some(0.0));
        }
    }

    #[test]
    fn attribute_substring_fallback() {
        let c = Catalog::embedded();
        let mut goal = c.goals[0].clone();
        let p = c.product(&goal.asin).unwrap().clone();
        // A phrase found only in the description counts; one found nowhere does not.
        let phrase = p
            .description
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        goal.attributes = vec![phrase, "zzqx unobtainium".into()];
        assert_eq!(attribute_matches(&p, &goal.attributes), 1);
    }

    #[test]
    fn type_ladder() {
        let c = Catalog::embedded();
        let goal = c.goals[0].clone();
        let mut p = c.product(&goal.asin).unwrap().clone();
        let nouns = vec![
            "a".to_string(),
            "b".into(),
            "c".into(),
            "d".into(),
            "e".into(),
        ];
        // title_score 1/5 = 0.2 (not > 0.2), but query matches: r_type stays 1.
        p.type_nouns = vec!["a".into()];
        assert_eq!(type_reward(&p, &goal, &nouns).0, 1.0);
        // Same, with neither query nor category matching: 0.5.
        p.query = "other".into();
        p.product_category = "X › Y".into();
        assert_eq!(type_reward(&p, &goal, &nouns).0, 0.5);
        // title_score 1/11 < 0.1: 0.1.
        let eleven: Vec<String> = (0..11).map(|i| format!("n{i}")).collect();
        p.type_nouns = vec!["n0".into()];
        assert_eq!(type_reward(&p, &goal, &eleven).0, 0.1);
        // No goal nouns: title_score 0.2, gated by query/category only.
        assert_eq!(type_reward(&p, &goal, &[]).3, 0.2);
    }
}
