//! The checked-in CRDs match the Rust types, and their CEL rules reject what they should.

mod fixtures;

use fixtures::*;
use kube::core::cel::validate_cel;

#[test]
fn checked_in_crds_match_the_types() {
    for (file, yaml) in laneway::api::crd_documents() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crds")
            .join(file);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == yaml,
            "{} drifted from the Rust types: run `cargo run --bin crdgen`",
            path.display()
        );
    }
}

fn errors<T: kube::CustomResourceExt + serde::Serialize>(obj: &T) -> String {
    match validate_cel(obj) {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_valid_lane_route_passes() {
    assert_eq!(errors(&route("dev-alice", &["order"], &["feature-x"], false)), "");
}

#[test]
fn a_lane_cannot_fall_back_to_itself() {
    let e = errors(&route("gray", &["order"], &["gray"], false));
    assert!(e.contains("spec.fallback must not list the lane itself"), "{e}");
    let mut r = route("x", &["order"], &["gray"], false);
    r.spec.lane = Some("gray".into());
    assert!(errors(&r).contains("must not list the lane itself"));
}

#[test]
fn services_and_service_selector_are_exclusive_and_one_is_required() {
    let mut both = route("gray", &["order"], &[], false);
    both.spec.service_selector = Some(selector(&[("tier", "backend")]));
    assert!(errors(&both).contains("exactly one of spec.services and spec.serviceSelector"));
    let mut neither = route("gray", &[], &[], false);
    neither.spec.services = None;
    assert!(errors(&neither).contains("exactly one of spec.services and spec.serviceSelector"));
}

#[test]
fn lane_names_must_be_label_values_without_pipes() {
    for bad in ["a|b", "-gray", "gray-", "with space"] {
        let mut r = route("r", &["order"], &[], false);
        r.spec.lane = Some(bad.into());
        assert!(
            errors(&r).contains("must be a valid label value"),
            "{bad}: {}",
            errors(&r)
        );
        let r = route("r", &["order"], &[bad], false);
        assert!(
            errors(&r).contains("every fallback lane must be a valid label value"),
            "{bad}"
        );
    }
    let mut r = route("My.Lane", &["order"], &[], false);
    r.metadata.name = Some("my.lane".into());
    assert_eq!(errors(&r), "");
}

#[test]
fn tag_names_are_unique_and_valid() {
    let ok = tag_rule(
        "order",
        "order",
        &[("gray", &[("v", "2")]), ("blue", &[("v", "3")])],
        None,
    );
    assert_eq!(errors(&ok), "");
    let dup = tag_rule(
        "order",
        "order",
        &[("gray", &[("v", "2")]), ("gray", &[("v", "3")])],
        None,
    );
    assert!(errors(&dup).contains("tag names must be unique"));
    let bad = tag_rule("order", "order", &[("a|b", &[("v", "2")])], None);
    assert!(errors(&bad).contains("must be a valid label value"));
}

#[test]
fn dubbo_needs_exactly_one_of_port_and_port_name() {
    let mut r = tag_rule("order", "order", &[], Some("order-service"));
    assert_eq!(errors(&r), "");
    if let Some(d) = r.spec.dubbo.as_mut() {
        d.port_name = Some("dubbo".into());
    }
    assert!(errors(&r).contains("exactly one of dubbo.port and dubbo.portName"));
    if let Some(d) = r.spec.dubbo.as_mut() {
        d.port = None;
    }
    assert_eq!(errors(&r), "");
}
