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
        out.state
            .ends_with("Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None")
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
