//! One WebShop text environment: the session state machine of `WebAgentTextEnv` + `SimServer`
//! in simple (`observation_mode='text'`) mode (WebShop `web_agent_site/envs/web_agent_text_env.py`,
//! `web_agent_site/app.py`).
//!
//! The env holds a goal, the current page, the search keywords and page number, the product
//! being viewed and the selected options; [`ShopEnv::step`] applies one `search[...]` or
//! `click[...]` action exactly as upstream does, including its no-ops.

use std::sync::Arc;

use serde::Serialize;

use crate::catalog::{Catalog, Product, py_float};
use crate::reward::{RewardBreakdown, reward};
use crate::search::SearchIndex;

/// Products per results page (`PRODUCT_WINDOW`).
pub const PRODUCT_WINDOW: usize = 10;
/// Separator of the simple-mode observation.
pub const SEP: &str = " [SEP] ";

/// A product sub-page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubPage {
    /// The description text.
    Description,
    /// One segment per bullet point.
    Features,
    /// Always empty (reviews are never loaded upstream).
    Reviews,
}

/// Which page the env shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Page {
    /// Home page with the search bar.
    Home,
    /// Search results.
    Results,
    /// A product page.
    Item,
    /// A product sub-page.
    Sub(SubPage),
    /// The "Thank you" page after `click[buy now]`.
    Done,
}

/// `get_available_actions()`: what the current page offers (AgentGym `/available_actions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AvailableActions {
    /// Only the home page has one (but `search[...]` is accepted everywhere).
    pub has_search_bar: bool,
    /// Lowercased clickable texts: buttons in document order, then ASINs, then option values,
    /// de-duplicated keeping first positions.
    pub clickables: Vec<String>,
}

/// Result of one [`ShopEnv::step`] (the text env's `(state, reward, done, info)`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepOutcome {
    /// The new simple-mode observation.
    pub state: String,
    /// The reward: non-zero only at `click[buy now]`.
    pub reward: f64,
    /// True after `click[buy now]`.
    pub done: bool,
    /// The verbose reward breakdown at purchase (an extension; AgentGym returns `null`).
    pub info: Option<RewardBreakdown>,
}

/// Parse `name[arg]` like upstream's `re.match(r'(.+)\[(.+)\]', action)`: on the first line,
/// `name` runs up to the last `[` that still leaves a non-empty argument before the last `]`.
/// Returns `None` when the string does not match (upstream: a no-op).
///
/// The WebShop bridge plugin keeps a copy (`plugins/webshop-bridge/src/env.rs::parse_action`):
/// a guest plugin builds against the SDK alone and cannot link this host crate. The bridge's
/// property test `parse_action_agrees_with_the_upstream_regex` checks that the two agree.
pub fn parse_action(action: &str) -> Option<(&str, &str)> {
    let line = action.split('\n').next().unwrap_or("");
    let close = line.rfind(']')?;
    if close < 3 {
        return None;
    }
    let open = line.as_bytes()[1..close - 1]
        .iter()
        .rposition(|&b| b == b'[')?
        + 1;
    Some((&line[..open], &line[open + 1..close]))
}

/// One env session (one AgentGym env id).
#[derive(Debug, Clone)]
pub struct ShopEnv {
    catalog: Arc<Catalog>,
    index: Arc<SearchIndex>,
    goal_index: usize,
    page: Page,
    keywords: Vec<String>,
    page_no: usize,
    hits: Vec<usize>,
    asin: Option<usize>,
    options: Vec<(String, String)>,
    last_reward: Option<RewardBreakdown>,
}

impl ShopEnv {
    /// A fresh env on goal `goal_index` (wrapped modulo the number of goals), on the home page.
    pub fn new(catalog: Arc<Catalog>, index: Arc<SearchIndex>, goal_index: u64) -> Self {
        let (goal_index, _) = catalog.goal(goal_index);
        Self {
            catalog,
            index,
            goal_index,
            page: Page::Home,
            keywords: Vec::new(),
            page_no: 1,
            hits: Vec::new(),
            asin: None,
            options: Vec::new(),
            last_reward: None,
        }
    }

    /// `reset(session=goal_index)`: switch to that goal and show the home page.
    pub fn reset(&mut self, goal_index: u64) -> String {
        *self = Self::new(self.catalog.clone(), self.index.clone(), goal_index);
        self.observation()
    }

    /// Index of the goal being played.
    pub fn goal_index(&self) -> usize {
        self.goal_index
    }

    /// The current page.
    pub fn page(&self) -> Page {
        self.page
    }

    /// The options selected on the current product, in selection order.
    pub fn selected_options(&self) -> &[(String, String)] {
        &self.options
    }

    /// The breakdown of the last purchase, if any.
    pub fn last_reward(&self) -> Option<&RewardBreakdown> {
        self.last_reward.as_ref()
    }

    fn goal_text(&self) -> &str {
        &self.catalog.goals[self.goal_index].instruction_text
    }

    /// `get_instruction_text()`: `Instruction: <text>`.
    pub fn instruction_text(&self) -> String {
        format!("Instruction: {}", self.goal_text())
    }

    fn product(&self) -> Option<&Product> {
        self.asin.map(|i| &self.catalog.products[i])
    }

    fn page_hits(&self) -> &[usize] {
        let start = (self.page_no - 1)
            .saturating_mul(PRODUCT_WINDOW)
            .min(self.hits.len());
        let end = (start + PRODUCT_WINDOW).min(self.hits.len());
        &self.hits[start..end]
    }

    /// A URL-like description of the page (AgentGym `/state`'s `url`).
    pub fn url(&self) -> String {
        let kw = self.keywords.join(" ");
        let asin = self.product().map(|p| p.asin.as_str()).unwrap_or("");
        match self.page {
            Page::Home => "/index".to_string(),
            Page::Results => format!("/search_results/{kw}/{}", self.page_no),
            Page::Item => format!("/item_page/{asin}/{kw}/{}", self.page_no),
            Page::Sub(s) => format!("/item_sub_page/{asin}/{kw}/{}/{s:?}", self.page_no),
            Page::Done => format!("/done/{asin}"),
        }
    }

    /// The simple-mode observation of the current page (`web_agent_text_env.py::convert_html_to_text`
    /// with `simple=True`).
    pub fn observation(&self) -> String {
        let mut seg: Vec<String> = Vec::new();
        if self.page == Page::Home {
            seg.push("WebShop".into());
        }
        if self.page != Page::Done {
            seg.push("Instruction:".into());
            seg.push(self.goal_text().into());
        }
        match self.page {
            Page::Home => seg.push("Search".into()),
            Page::Results => self.results_segments(&mut seg),
            Page::Item => self.item_segments(&mut seg),
            Page::Sub(sub) => {
                let p = self.product().expect("sub-page has a product");
                seg.push("Back to Search".into());
                seg.push("< Prev".into());
                match sub {
                    SubPage::Description => seg.push(p.description.clone()),
                    SubPage::Features => seg.extend(p.bullet_points.iter().cloned()),
                    SubPage::Reviews => {}
                }
            }
            Page::Done => self.done_segments(&mut seg),
        }
        seg.iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(SEP)
    }

    /// The results page: its navigation, then each hit's ASIN, name and price.
    fn results_segments(&self, seg: &mut Vec<String>) {
        seg.push("Back to Search".into());
        seg.push(format!(
            "Page {} (Total results: {})",
            self.page_no,
            self.hits.len()
        ));
        if self.page_no > 1 {
            seg.push("< Prev".into());
        }
        seg.push("Next >".into());
        for &h in self.page_hits() {
            let p = &self.catalog.products[h];
            seg.push(p.asin.to_uppercase());
            seg.push(p.name.clone());
            seg.push(p.price_tag());
        }
    }

    /// An item page: navigation, the option groups, name, price, rating and the sub-page links.
    fn item_segments(&self, seg: &mut Vec<String>) {
        let p = self.product().expect("item page has a product");
        seg.push("Back to Search".into());
        seg.push("< Prev".into());
        for g in &p.options {
            seg.push(g.name.clone());
            seg.extend(g.values.iter().cloned());
        }
        seg.push(p.name.clone());
        seg.push(format!("Price: {}", p.price_tag()));
        seg.push("Rating: N.A.".into());
        for s in ["Description", "Features", "Reviews", "Buy Now"] {
            seg.push(s.into());
        }
    }

    /// The page after `click[buy now]`: the purchase, its options and its score.
    fn done_segments(&self, seg: &mut Vec<String>) {
        let p = self.product().expect("done page has a product");
        let opts = self
            .options
            .iter()
            .map(|(k, v)| format!("'{k}': '{v}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let r = self.last_reward.as_ref().map(|r| r.reward).unwrap_or(0.0);
        seg.extend(
            [
                "Thank you for shopping with us!",
                "Your code:",
                "None",
                "(Paste it in your MTurk interface.)",
                "Purchased",
                "asin",
            ]
            .map(String::from),
        );
        seg.push(p.asin.clone());
        seg.push("options".into());
        seg.push(format!("{{{opts}}}"));
        seg.push("Your score (min 0.0, max 1.0)".into());
        seg.push(py_float(r));
        seg.push("Reward Details".into());
        seg.push("None".into());
    }

    /// `get_available_actions()` of the current page (`web_agent_text_env.py`).
    pub fn available_actions(&self) -> AvailableActions {
        let mut clickables: Vec<String> = Vec::new();
        let mut push = |s: String| {
            if !clickables.contains(&s) {
                clickables.push(s);
            }
        };
        match self.page {
            Page::Home => push("search".into()),
            Page::Results => {
                push("back to search".into());
                if self.page_no > 1 {
                    push("< prev".into());
                }
                push("next >".into());
                for &h in self.page_hits() {
                    push(self.catalog.products[h].asin.to_lowercase());
                }
            }
            Page::Item => {
                for b in [
                    "back to search",
                    "< prev",
                    "description",
                    "features",
                    "reviews",
                    "buy now",
                ] {
                    push(b.into());
                }
                if let Some(p) = self.product() {
                    for g in &p.options {
                        for v in &g.values {
                            push(v.to_lowercase());
                        }
                    }
                }
            }
            Page::Sub(_) => {
                push("back to search".into());
                push("< prev".into());
            }
            Page::Done => {}
        }
        AvailableActions {
            has_search_bar: self.page == Page::Home,
            clickables,
        }
    }

    /// Apply one action (`web_agent_text_env.py::step`): `search[q]` with a non-empty `q` from any page, or
    /// `click[x]` for a current clickable other than `search`; anything else is a no-op with
    /// reward 0. `done` is true only for `click[buy now]`.
    pub fn step(&mut self, action: &str) -> StepOutcome {
        let mut reward_out = 0.0;
        let mut done = false;
        let mut info = None;
        if let Some((name, arg)) = parse_action(action) {
            let arg = arg.to_lowercase();
            if name == "search" && !arg.is_empty() {
                self.search(arg.split(' ').map(str::to_string).collect());
            } else if name == "click"
                && arg != "search"
                && self.available_actions().clickables.contains(&arg)
                && let Some(b) = self.click(&arg)
            {
                reward_out = b.reward;
                done = true;
                info = Some(b);
            }
        }
        StepOutcome {
            state: self.observation(),
            reward: reward_out,
            done,
            info,
        }
    }

    fn search(&mut self, keywords: Vec<String>) {
        self.hits = self.index.search(&keywords);
        self.keywords = keywords;
        self.page_no = 1;
        self.asin = None;
        self.options.clear();
        self.page = Page::Results;
    }

    /// Click a clickable of the current page; returns the breakdown for `buy now`.
    fn click(&mut self, name: &str) -> Option<RewardBreakdown> {
        match (name, self.page) {
            ("buy now", Page::Item) => {
                let p = self.product().expect("item page has a product").clone();
                let goal = &self.catalog.goals[self.goal_index];
                let nouns = self.catalog.goal_nouns(goal);
                let values: Vec<String> = self.options.iter().map(|(_, v)| v.clone()).collect();
                let b = reward(&p, p.price, &values, goal, &nouns);
                self.last_reward = Some(b.clone());
                self.page = Page::Done;
                return Some(b);
            }
            ("next >", Page::Results) => self.page_no += 1,
            ("< prev", Page::Results) => self.page_no = self.page_no.saturating_sub(1).max(1),
            ("< prev", Page::Sub(_)) => self.page = Page::Item,
            ("< prev", Page::Item) => {
                self.options.clear();
                self.asin = None;
                self.page = Page::Results;
            }
            ("back to search", _) => {
                self.keywords.clear();
                self.hits.clear();
                self.page_no = 1;
                self.asin = None;
                self.options.clear();
                self.page = Page::Home;
            }
            ("description", Page::Item) => self.page = Page::Sub(SubPage::Description),
            ("features", Page::Item) => self.page = Page::Sub(SubPage::Features),
            ("reviews", Page::Item) => self.page = Page::Sub(SubPage::Reviews),
            (value, Page::Item) => {
                // An option radio; when several groups hold the value, the last one wins
                // (upstream's text-to-element dict keeps the last element).
                let p = self.product().expect("item page has a product");
                if let Some(g) = p
                    .options
                    .iter()
                    .rev()
                    .find(|g| g.values.iter().any(|v| v == value))
                {
                    let group = g.name.clone();
                    match self.options.iter_mut().find(|(k, _)| *k == group) {
                        Some(slot) => slot.1 = value.to_string(),
                        None => self.options.push((group, value.to_string())),
                    }
                }
            }
            (asin, Page::Results) => {
                self.asin = self
                    .catalog
                    .products
                    .iter()
                    .position(|p| p.asin.eq_ignore_ascii_case(asin));
                self.options.clear();
                if self.asin.is_some() {
                    self.page = Page::Item;
                }
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An env on the first goal for `asin` whose options start with `first_option`.
    fn env_for(asin: &str, first_option: &str) -> ShopEnv {
        let c = Catalog::embedded();
        let g = c.goal_index(asin, first_option).unwrap();
        let index = Arc::new(SearchIndex::new(&c));
        ShopEnv::new(Arc::new(c), index, g)
    }

    fn clickables(env: &ShopEnv) -> Vec<String> {
        env.available_actions().clickables
    }

    #[test]
    fn parse_action_follows_the_upstream_regex() {
        assert_eq!(
            parse_action("search[red shirt]"),
            Some(("search", "red shirt"))
        );
        assert_eq!(parse_action("click[< Prev]"), Some(("click", "< Prev")));
        assert_eq!(parse_action("click[[x]]"), Some(("click[", "x]")));
        assert_eq!(parse_action("search[]"), None);
        assert_eq!(parse_action("[x]"), None);
        assert_eq!(parse_action("click[a]\nsearch[b]"), Some(("click", "a")));
        assert_eq!(parse_action("click b0ws000001"), None);
        assert_eq!(parse_action("é[x]"), Some(("é", "x")));
    }

    #[test]
    fn home_page_after_reset() {
        let mut env = env_for("B0WS000001", "black");
        let instr = env.catalog.goals[env.goal_index()].instruction_text.clone();
        assert_eq!(
            env.reset(env.goal_index() as u64),
            format!("WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search")
        );
        assert_eq!(
            env.available_actions(),
            AvailableActions {
                has_search_bar: true,
                clickables: vec!["search".into()]
            }
        );
    }

    #[test]
    fn transition_table() {
        let mut env = env_for("B0WS000001", "black");
        let instr = env
            .instruction_text()
            .trim_start_matches("Instruction: ")
            .to_string();
        let head = format!("Instruction: [SEP] {instr} [SEP] Back to Search");

        // click[search] and unknown or malformed actions are no-ops with reward 0.
        let home = env.observation();
        for a in [
            "click[search]",
            "click[buy now]",
            "buy it",
            "search[]",
            "Search[shirt]",
        ] {
            let out = env.step(a);
            assert_eq!(
                (out.state.as_str(), out.reward, out.done),
                (home.as_str(), 0.0, false),
                "{a}"
            );
        }

        // search -> results page 1 (upper-case ASINs shown, lower-case clicked).
        let out = env.step("search[Spandex]");
        assert_eq!(env.page(), Page::Results);
        let n = env.hits.len();
        assert!(n >= 2);
        assert!(out.state.starts_with(&format!(
            "{head} [SEP] Page 1 (Total results: {n}) [SEP] Next > [SEP] B0WS0000"
        )));
        let cl = clickables(&env);
        assert_eq!(&cl[..2], ["back to search", "next >"]);
        assert!(cl.contains(&"b0ws000001".to_string()));

        // next > past the end: no products, < Prev and Next > both shown.
        let out = env.step("click[next >]");
        assert_eq!(
            out.state,
            format!("{head} [SEP] Page 2 (Total results: {n}) [SEP] < Prev [SEP] Next >")
        );
        assert_eq!(clickables(&env), ["back to search", "< prev", "next >"]);
        env.step("click[< prev]");
        assert!(env.observation().contains("Page 1 ("));

        // asin -> item page.
        let out = env.step("click[B0WS000001]");
        assert_eq!(env.page(), Page::Item);
        assert_eq!(
            out.state,
            format!(
                "{head} [SEP] < Prev [SEP] color [SEP] black [SEP] heather grey [SEP] navy blue [SEP] size [SEP] small \
                 [SEP] medium [SEP] large [SEP] x-large [SEP] Acme Women's Cotton Spandex Crew Neck T-Shirt [SEP] \
                 Price: $12.5 to $19.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
            )
        );
        assert_eq!(
            clickables(&env),
            [
                "back to search",
                "< prev",
                "description",
                "features",
                "reviews",
                "buy now",
                "black",
                "heather grey",
                "navy blue",
                "small",
                "medium",
                "large",
                "x-large"
            ]
        );

        // Option clicks record the selection but leave the text unchanged.
        let item = env.observation();
        assert_eq!(env.step("click[black]").state, item);
        assert_eq!(env.step("click[large]").state, item);
        assert_eq!(env.step("click[x-large]").state, item);
        assert_eq!(
            env.selected_options(),
            [
                ("color".into(), "black".into()),
                ("size".into(), "x-large".into())
            ]
        );

        // Sub-pages, and < Prev back to the item with options kept.
        let out = env.step("click[features]");
        assert_eq!(
            out.state,
            format!(
                "{head} [SEP] < Prev [SEP] 95% cotton, 5% spandex [SEP] machine wash cold, tumble dry low [SEP] classic crew neck"
            )
        );
        assert_eq!(clickables(&env), ["back to search", "< prev"]);
        assert_eq!(
            env.step("click[reviews]").state,
            out.state,
            "sub-page has no reviews button"
        );
        env.step("click[< prev]");
        env.step("click[reviews]");
        assert_eq!(env.observation(), format!("{head} [SEP] < Prev"));
        env.step("click[< prev]");
        env.step("click[description]");
        assert_eq!(
            env.observation(),
            format!(
                "{head} [SEP] < Prev [SEP] A soft stretch tee with a relaxed fit for everyday wear."
            )
        );
        env.step("click[< prev]");
        assert_eq!(env.page(), Page::Item);
        assert_eq!(env.selected_options().len(), 2);

        // < Prev from the item clears options and returns to the same results page.
        env.step("click[< prev]");
        assert_eq!(env.page(), Page::Results);
        assert!(env.selected_options().is_empty());

        // Back to Search -> home page of the same goal.
        let out = env.step("click[back to search]");
        assert_eq!(out.state, home);

        // search works from the item page too and resets the product.
        env.step("search[cotton spandex]");
        env.step("click[b0ws000001]");
        env.step("search[leggings]");
        assert_eq!(env.page(), Page::Results);

        // Buy with the goal's options: 1.0, and the episode ends. (An x-large would score 0.8
        // against this synthetic goal's size `large`; see reward.rs.)
        env.step("search[cotton spandex]");
        env.step("click[b0ws000001]");
        env.step("click[black]");
        env.step("click[large]");
        let out = env.step("click[buy now]");
        assert!(out.done);
        assert_eq!(out.reward, 1.0);
        assert!(
            out.state
                .starts_with("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP]")
        );
        assert!(
            out.state.ends_with(
                "Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None"
            )
        );
        assert_eq!(out.info.unwrap().reward, 1.0);
        assert_eq!(
            env.available_actions(),
            AvailableActions {
                has_search_bar: false,
                clickables: vec![]
            }
        );
    }

    #[test]
    fn same_goal_and_actions_give_the_same_episode() {
        let actions = [
            "search[insulated]",
            "click[b0ws000020]",
            "click[black]",
            "click[buy now]",
        ];
        let run = || {
            let mut env = env_for("B0WS000019", "black");
            actions
                .iter()
                .map(|a| {
                    let o = env.step(a);
                    (o.state, o.reward, o.done)
                })
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        // The travel mug shares no noun with the bottle goal: reward 0 at purchase.
        assert_eq!(a[3].1, 0.0);
        assert!(a[3].2);
    }
}
