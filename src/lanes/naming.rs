//! Deterministic names for the objects laneway writes.
//!
//! Lane and baseline Services are named `<service>--<lane>-<hash>` and
//! `<service>--baseline-<hash>`: the double dash and the hash of the exact inputs keep them
//! apart from each other and from names people choose, and they always fit in 63 characters.

use sha2::{Digest, Sha256};

const MAX_NAME: usize = 63;
const HASH_LEN: usize = 8;

/// Lowercase hex SHA-256 of `parts`, each terminated by a NUL so that no two lists collide.
pub fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize())
}

/// Hash of an object's JSON form (128-bit XXH3, in hex): what laneway stamps on each output it
/// applies, to tell later whether the output changed.
pub fn content_hash<T: serde::Serialize>(obj: &T) -> String {
    thread_local! {
        static JSON: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    JSON.with_borrow_mut(|json| {
        json.clear();
        // Writing to a Vec cannot fail, and these objects always serialize.
        let _ = serde_json::to_writer(&mut *json, obj);
        hex(&xxhash_rust::xxh3::xxh3_128(json).to_be_bytes())
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

fn short_hash(parts: &[&str]) -> String {
    digest(parts)[..HASH_LEN].to_owned()
}

/// `readable` reduced to a DNS-1035 label prefix, followed by the hash of `parts`.
fn hashed_name(readable: &str, parts: &[&str]) -> String {
    let mut base: String = readable
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect();
    base.truncate(MAX_NAME - HASH_LEN - 1);
    let base = base.trim_matches(|c: char| c == '-' || c.is_ascii_digit());
    let base = if base.is_empty() { "lane" } else { base };
    format!("{base}-{}", short_hash(parts))
}

/// The selectorless Service that carries `service`'s subset for `lane`.
pub fn lane_service_name(service: &str, lane: &str) -> String {
    hashed_name(&format!("{service}--{lane}"), &["lane", service, lane])
}

/// The selectorless Service that carries `service`'s baseline (untagged) subset.
pub fn baseline_service_name(service: &str) -> String {
    hashed_name(&format!("{service}--baseline"), &["baseline", service])
}

/// An HTTPRoute of LaneEntry `entry`; `part` tells its routes apart.
pub fn route_name(entry: &str, part: &str) -> String {
    hashed_name(&format!("{entry}--{part}"), &["route", entry, part])
}

/// An EndpointSlice of `service` for one address family, one port set of that family and one
/// chunk of at most 100 endpoints. `set` is `"0"` for a family's only port set, and the same
/// for its placeholder, so that a Service's last pod leaving or the first coming back is one
/// write; with several, each is named by its ports' signature, so that one coming or going
/// never moves another's endpoints from one slice to another (a reader seeing the update
/// before the create would miss them).
pub fn slice_name(service: &str, family: &str, set: &str, chunk: usize) -> String {
    format!("{service}-{}", short_hash(&[family, set, &chunk.to_string()]))
}

/// The Service an EndpointSlice named by [`slice_name`] is of.
pub fn slice_service(slice: &str) -> Option<&str> {
    let (service, hash) = slice.rsplit_once('-')?;
    (hash.len() == HASH_LEN).then_some(service)
}

#[cfg(test)]
mod tests {
    #[test]
    fn content_hash_is_the_xxh3_of_the_json() {
        let obj = serde_json::json!({"a": [1, "x"], "b": null});
        assert_eq!(super::content_hash(&obj), "30a9ebcf79e41dfe9ebd37408b7cbd70");
        let other = serde_json::json!({"a": [1, "y"], "b": null});
        assert_ne!(super::content_hash(&obj), super::content_hash(&other));
        assert_eq!(
            super::digest(&["abc"]),
            "dc1114cd074914bd872cc1f9a23ec910ea2203bc79779ab2e17da25782a624fc"
        );
    }

    use super::*;

    fn is_dns1035(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn names_are_readable_and_valid() {
        let n = lane_service_name("order", "dev-alice");
        assert!(n.starts_with("order--dev-alice-"), "{n}");
        assert!(is_dns1035(&n));
        let b = baseline_service_name("order");
        assert!(b.starts_with("order--baseline-"), "{b}");
        assert!(is_dns1035(&b));
        let slice = slice_name("my-order", "IPv4", "0", 0);
        assert_eq!(slice_service(&slice), Some("my-order"));
    }

    #[test]
    fn long_and_odd_inputs_still_give_valid_names() {
        let svc = "a".repeat(63);
        let lane = format!("Feature_X.{}", "9".repeat(50));
        for n in [lane_service_name(&svc, &lane), baseline_service_name(&svc)] {
            assert!(is_dns1035(&n), "{n}");
        }
        assert!(is_dns1035(&lane_service_name("s", "9lives")));
    }

    #[test]
    fn lanes_that_sanitise_alike_get_different_names() {
        assert_ne!(
            lane_service_name("order", "Gray"),
            lane_service_name("order", "gray")
        );
        assert_ne!(
            lane_service_name("order", "a.b"),
            lane_service_name("order", "a-b")
        );
        assert_ne!(
            lane_service_name("order", "baseline"),
            baseline_service_name("order")
        );
        assert_ne!(lane_service_name("a--b", "c"), lane_service_name("a", "b--c"));
    }
}
