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
mod tests;
