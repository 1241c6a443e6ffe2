//! proptest strategies shared by the property tests of the server's routes and of the
//! `webshop-bridge` plugin (feature `testing`).

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::Value;

/// Any JSON value up to 3 levels deep: nulls, booleans, any `i64`/`u64`, finite floats, any
/// unicode strings and keys.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |x| x.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
