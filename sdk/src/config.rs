//! Parsing env configs: the one helper every plugin needs.

use crate::types::EnvError;

/// Parse an env config: `""` (or only whitespace) and `{}` mean the defaults; otherwise a JSON
/// object whose keys are the fields of `C` (unknown keys are rejected by `deny_unknown_fields`).
/// Text that is not JSON is accepted only by a `C` that deserialises from a string.
///
/// # Errors
/// [`EnvError::InvalidConfig`] naming the offending field when one has the wrong type or is
/// unknown, or saying why the text is not a JSON object.
pub fn parse_config<C>(json: &str) -> Result<C, EnvError>
where
    C: serde::de::DeserializeOwned + Default,
{
    if json.trim().is_empty() {
        return Ok(C::default());
    }
    let value: serde_json::Value = match serde_json::from_str(json) {
        Ok(value) => value,
        // A config type that is a string (e.g. `String`) takes text that is not JSON as is.
        Err(e) => {
            return serde_json::from_value(serde_json::Value::String(json.to_string()))
                .map_err(|_| EnvError::InvalidConfig(format!("config is not valid JSON: {e}")));
        }
    };
    let serde_json::Value::Object(map) = &value else {
        return Err(EnvError::InvalidConfig(
            "config must be a JSON object".to_string(),
        ));
    };
    if map.is_empty() {
        return Ok(C::default());
    }
    match serde_json::from_value::<C>(value.clone()) {
        Ok(config) => Ok(config),
        Err(whole) => {
            // serde_json's type errors do not say which key failed: retry key by key to name it.
            for (key, field) in map {
                let single = serde_json::Value::Object(
                    std::iter::once((key.clone(), field.clone())).collect(),
                );
                if let Err(e) = serde_json::from_value::<C>(single) {
                    return Err(EnvError::InvalidConfig(format!("field `{key}`: {e}")));
                }
            }
            Err(EnvError::InvalidConfig(whole.to_string()))
        }
    }
}
