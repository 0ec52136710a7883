//! Keeps the API server's `Retry-After` on a 429. Priority and Fairness answers a request it
//! sheds with a plain-text body and the wait in that header; the client turns any error answer
//! into a `Status` read from the body alone, so the wait would be lost. This layer of the write
//! client rewrites such an answer into the `Status` the API server sends for its other 429s,
//! with the wait as `details.retryAfterSeconds`, which [`super::WriteError::Throttled`] keeps.

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::{Body, DynBody};
use serde_json::json;
use tower::util::MapResponseLayer;

type Answer = Response<Box<DynBody>>;

/// The layer to add to the write client.
pub fn retry_after_layer() -> MapResponseLayer<fn(Answer) -> Answer> {
    MapResponseLayer::new(keep_retry_after)
}

/// A plain-text 429 with a `Retry-After` in seconds, as a `Status` carrying it; any other
/// answer as it is.
fn keep_retry_after(answer: Answer) -> Answer {
    let Some(seconds) = shed_for(&answer) else {
        return answer;
    };
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
        "reason": "TooManyRequests",
        "message": "Too many requests, please try again later.",
        "details": {"retryAfterSeconds": seconds},
    });
    let (mut parts, _) = answer.into_parts();
    parts
        .headers
        .insert(CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    let body = Body::from(status.to_string().into_bytes()).map_err(tower::BoxError::from);
    Response::from_parts(parts, Box::new(body))
}

/// The seconds a 429 that is no `Status` asks to wait.
fn shed_for<B>(answer: &Response<B>) -> Option<u32> {
    let headers = answer.headers();
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if answer.status() != StatusCode::TOO_MANY_REQUESTS || json {
        return None;
    }
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::writer::{WriteError, THROTTLED_FLOOR};

    fn answer(code: u16, content_type: &str, retry_after: Option<&str>, body: &str) -> Answer {
        let mut builder = Response::builder()
            .status(code)
            .header(CONTENT_TYPE, content_type);
        if let Some(r) = retry_after {
            builder = builder.header(RETRY_AFTER, r);
        }
        let body = Body::from(body.as_bytes().to_vec()).map_err(tower::BoxError::from);
        builder.body(Box::new(body) as Box<DynBody>).expect("response")
    }

    /// What the writer makes of `answer` once the client has read it as an error.
    async fn write_error(answer: Answer) -> WriteError {
        let answer = keep_retry_after(answer);
        let bytes = answer.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8(bytes.to_vec()).expect("utf-8");
        let status = serde_json::from_str::<kube::core::Status>(&text).unwrap_or_else(|_| {
            kube::core::Status::failure(&text, "Failed to parse error data").with_code(429)
        });
        WriteError::from(kube::Error::Api(status.boxed()))
    }

    #[tokio::test]
    async fn a_shed_request_waits_what_the_api_server_asked_and_never_less_than_the_floor() {
        let plain = "text/plain; charset=utf-8";
        let shed = "Too many requests, please try again later.\n";
        let cases = [
            (answer(429, plain, Some("3"), shed), Duration::from_secs(3)),
            (answer(429, plain, Some("32"), shed), Duration::from_secs(32)),
            // No header (or one in another form): the floor.
            (answer(429, plain, None, shed), THROTTLED_FLOOR),
            (
                answer(429, plain, Some("Wed, 21 Oct 2026 07:28:00 GMT"), shed),
                THROTTLED_FLOOR,
            ),
            (answer(429, plain, Some("0"), shed), THROTTLED_FLOOR),
        ];
        for (answer, wait) in cases {
            assert_eq!(write_error(answer).await.retry_after(), Some(wait));
        }
        // A Status the server sent itself is kept, with its own wait.
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":5}}"#;
        let e = write_error(answer(429, "application/json", Some("1"), status)).await;
        assert_eq!(e.retry_after(), Some(Duration::from_secs(5)));
        assert!(e.to_string().contains("storage is (re)initializing"), "{e}");
    }

    #[tokio::test]
    async fn other_answers_pass_untouched() {
        let conflict = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"conflict","reason":"Conflict","code":409}"#;
        let kept = keep_retry_after(answer(409, "application/json", Some("1"), conflict));
        assert_eq!(kept.status(), 409);
        let bytes = kept.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], conflict.as_bytes());
        let e = write_error(answer(409, "application/json", None, conflict)).await;
        assert_eq!(e.retry_after(), None);
        assert!(e.is_transient());
    }
}
