//! # ragen-gym-webshop: a WebShop-compatible test server and the WebShop reward
//!
//! A native stand-in for the WebShop text environment (Yao et al. 2022, `princeton-nlp/WebShop`
//! `master`) served through the AgentGym `agentenv-webshop` env-server routes, so the
//! `webshop-bridge` plugin can be tested end to end without Python, Java or the real data.
//! It follows upstream's simple-mode page strings and transitions (`web_agent_site/envs/
//! web_agent_text_env.py`), AgentGym's routes and JSON shapes (`agentenv-webshop`), and the
//! reward of `web_agent_site/engine/goal.py::get_reward` with thefuzz 0.19.0's
//! `token_set_ratio` (see [`token_set_ratio`](mod@token_set_ratio)); synthetic goals keep their
//! `{name: value}` options and are scored as `(name, value)` pairs, as upstream does.
//!
//! ```no_run
//! use ragen_gym_webshop::{Catalog, WebShopServer};
//! let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
//! // POST {base}/create, POST {base}/reset {"env_idx": id, "session_id": 0}, ...
//! server.stop();
//! ```
//!
//! ## Deviations from the real WebShop
//!
//! * **Tiny catalog**: 26 synthetic products and 36 synthetic goals (`data/catalog.json`),
//!   not the 1.18M scraped products; goal indices wrap modulo the number of goals, so the
//!   standard split ranges (test 0-499, dev 500-1499, train 1500+) revisit the same goals.
//! * **No spaCy**: product-type nouns are stored in the catalog (`type_nouns`).
//! * **No Lucene BM25**: an in-process BM25 (k1 0.9, b 0.4) over alphanumeric tokens without
//!   stemming or stopwords; rankings are not comparable with the real index.
//! * **Deterministic prices**: range-priced products carry a fixed reward price and goal
//!   budgets are fixed in the catalog (upstream draws both with an unseeded `random`).
//! * **No human instructions**, no images, no `<r>`/`<a>`/`<c>`/`<q>` query prefixes, no
//!   HTML routes; the done page keeps upstream's head and score tail but not every field.

#![deny(missing_docs)]

pub mod catalog;
pub mod env;
pub mod error;
pub mod reward;
#[cfg(test)]
mod route_proptests;
pub mod search;
pub mod server;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod token_set_ratio;

pub use catalog::{Catalog, EMBEDDED_CATALOG, Goal, OptionGroup, Product};
pub use env::{AvailableActions, Page, ShopEnv, StepOutcome, SubPage, parse_action};
pub use error::WebShopError;
pub use reward::{RewardBreakdown, normalize_color, reward};
pub use search::SearchIndex;
pub use server::{RouteResponse, SessionLimits, Shop, WebShopServer};
pub use token_set_ratio::token_set_ratio;
