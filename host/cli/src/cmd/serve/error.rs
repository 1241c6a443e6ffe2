//! Errors of the server, as OpenAI sends them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}` (OpenAI API reference, "Error codes";
//! the shape of `openai-python`'s `APIStatusError.body`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A bad request: malformed JSON, a missing or invalid field (`param` names it).
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
        /// The request field at fault.
        param: Option<String>,
    },
    /// No or a wrong bearer key.
    #[error("missing or incorrect API key (send `Authorization: Bearer KEY`)")]
    Unauthorized,
    /// The request names a model this server does not serve.
    #[error("the model `{asked}` does not exist; this server serves `{served}`")]
    ModelNotFound {
        /// The requested name.
        asked: String,
        /// The served name.
        served: String,
    },
    /// No such route.
    #[error("no route {0}")]
    NoRoute(String),
    /// The body is larger than the server accepts.
    #[error("the request body is over the limit of {limit} bytes (or could not be read)")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The queue is full.
    #[error("the server is busy ({queued} requests queued); retry later")]
    Busy {
        /// The queue's capacity.
        queued: usize,
    },
    /// The sampler failed, or the server is shutting down.
    #[error("{0}")]
    Server(String),
}

impl ApiError {
    /// A 400 naming `param`.
    pub fn field(param: &str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
            param: Some(param.to_string()),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound { .. } | Self::NoRoute(_) => StatusCode::NOT_FOUND,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Server(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error object's `type` and `code`.
    fn kind(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::BadRequest { .. } | Self::TooLarge { .. } | Self::NoRoute(_) => {
                ("invalid_request_error", None)
            }
            Self::Unauthorized => ("invalid_request_error", Some("invalid_api_key")),
            Self::ModelNotFound { .. } => ("invalid_request_error", Some("model_not_found")),
            Self::Busy { .. } => ("rate_limit_error", Some("rate_limit_exceeded")),
            Self::Server(_) => ("server_error", None),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let (kind, code) = self.kind();
        let param = match self {
            Self::BadRequest { param, .. } => param.clone(),
            Self::ModelNotFound { .. } => Some("model".into()),
            _ => None,
        };
        serde_json::json!({"error": {
            "message": self.to_string(),
            "type": kind,
            "param": param,
            "code": code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_openais_shape_and_status() {
        let e = ApiError::field("temperature", "temperature must be between 0 and 2");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "temperature must be between 0 and 2",
                "type": "invalid_request_error", "param": "temperature", "code": null}})
        );
        let e = ApiError::ModelNotFound {
            asked: "gpt-4".into(),
            served: "m".into(),
        };
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.body()["error"]["code"], "model_not_found");
        assert_eq!(ApiError::Busy { queued: 4 }.status().as_u16(), 429);
    }
}
