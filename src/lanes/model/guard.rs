//! The baseline guard: a user Service that leaves `spec.selector` out and names its pods in
//! the `laneway.io/selector` annotation instead. Laneway then writes that Service's own
//! EndpointSlices with its untagged pods only, so that no caller of the Service (kube-proxy,
//! DNS, anything reading its slices) reaches a tagged pod.

use std::collections::BTreeMap;

use crate::lanes::labels::GUARD_ANNOTATION;

/// What the annotation makes of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Guard {
    /// No annotation: an ordinary Service.
    #[default]
    None,
    /// A valid annotation and no `spec.selector`: laneway writes the Service's slices.
    Guarded,
    /// The annotation beside a `spec.selector`: the built-in controller writes the Service's
    /// slices with every pod, tagged ones included, so the annotation guards nothing.
    WithSelector,
    /// An annotation laneway cannot read (the error): it keeps the selector it knew the Service
    /// by, or, knowing none (it started since), leaves the Service's slices as they are.
    Invalid(String),
}

/// The annotation's value as a Service selector: comma-separated `key=value` (or
/// `key==value`) terms with valid label keys and values, each key once.
pub fn parse_selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut selector = BTreeMap::new();
    for term in text.split(',').map(str::trim) {
        if term.is_empty() {
            return Err(format!("{GUARD_ANNOTATION}: empty term in {text:?}"));
        }
        let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) else {
            return Err(format!(
                "{GUARD_ANNOTATION}: {term:?} is not key=value (a Service selects pods by key=value pairs only)"
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.ends_with('!') {
            return Err(format!(
                "{GUARD_ANNOTATION}: {term:?}: != is not supported (a Service selects pods by key=value pairs only)"
            ));
        }
        label_key(key).map_err(|e| format!("{GUARD_ANNOTATION}: key {key:?} {e}"))?;
        label_value(value).map_err(|e| format!("{GUARD_ANNOTATION}: value {value:?} {e}"))?;
        if selector.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("{GUARD_ANNOTATION}: key {key:?} appears twice"));
        }
    }
    Ok(selector)
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name.
fn label_key(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            let label = |l: &str| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            };
            if prefix.len() > 253 || !prefix.split('.').all(label) {
                return Err("has a prefix that is not a DNS subdomain".into());
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("has no name".into());
    }
    label_value(name)
}

/// A label value: at most 63 characters, alphanumerics with `-`, `_` or `.` inside.
fn label_value(value: &str) -> Result<(), String> {
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let ends = |c: Option<u8>| c.is_none_or(|b| b.is_ascii_alphanumeric());
    let bytes = value.as_bytes();
    if value.len() > 63 {
        Err("is longer than 63 characters".into())
    } else if !bytes.iter().copied().all(inner)
        || !ends(bytes.first().copied())
        || !ends(bytes.last().copied())
    {
        Err("must be alphanumerics with '-', '_' or '.' between them".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_selector;

    #[test]
    fn equality_terms_are_a_selector() {
        let s = parse_selector("app=order, tier == web,example.com/team=").expect("valid");
        assert_eq!(s.len(), 3);
        assert_eq!(s["app"], "order");
        assert_eq!(s["tier"], "web");
        assert_eq!(s["example.com/team"], "");
    }

    #[test]
    fn what_a_service_selector_cannot_say_is_refused_by_name() {
        for (text, says) in [
            ("", "empty term"),
            ("app=order,", "empty term"),
            ("app", "not key=value"),
            ("app in (order)", "not key=value"),
            ("app!=order", "!= is not supported"),
            ("app=order,app=user", "appears twice"),
            ("-app=order", "key \"-app\""),
            ("Example.com/app=order", "prefix"),
            ("app=order user", "value \"order user\""),
        ] {
            let e = parse_selector(text).expect_err(text);
            assert!(
                e.contains(says) && e.starts_with("laneway.io/selector"),
                "{text}: {e}"
            );
        }
    }
}
