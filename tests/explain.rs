//! `laneway explain` on the shipped examples, offline: what a user reads.

use std::process::Command;

fn explain(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-laneway"))
        .arg("explain")
        .args(args)
        .args([
            "-n",
            "shop",
            "-f",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples"),
        ])
        .output()
        .expect("run kubectl-laneway");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_lane_table_shows_each_service_source_and_pods() {
    assert_eq!(
        explain(&["dev-alice"]),
        "Lane dev-alice in namespace shop (LaneRoute dev-alice; falls back to: feature-x, baseline)\n\
         \n\
         SERVICE      SOURCE              READY  PODS\n\
         gateway-bff  Baseline            2      gateway-bff-0, gateway-bff-1\n\
         order        Lane                1      order-alice-0\n\
         pay          Baseline            2      pay-0, pay-1\n\
         user         Fallback:feature-x  1      user-feature-x-0\n"
    );
}

#[test]
fn one_service_shows_every_tier_tried() {
    assert_eq!(
        explain(&["dev-alice", "--service", "user"]),
        "Lane dev-alice in namespace shop (LaneRoute dev-alice; falls back to: feature-x, baseline)\n\
         Service user: source Fallback:feature-x, served by user-feature-x-0\n  \
         1. lane dev-alice: 0 ready\n  \
         2. lane feature-x: 1 ready (user-feature-x-0)  <- serves\n  \
         3. baseline: 2 ready (user-0, user-1)  (not needed)\n"
    );
}

#[test]
fn a_strict_lane_without_instances_says_why_it_is_empty() {
    assert_eq!(
        explain(&["dev-bob", "-s", "pay"]),
        "Lane dev-bob in namespace shop (LaneRoute dev-bob, strict; falls back to: none)\n\
         Service pay: source Empty, served by -\n  \
         1. lane dev-bob: 0 ready\n  \
         No tier has a ready pod and the lane is strict: requests in this lane get no endpoint.\n"
    );
}

#[test]
fn dynamic_tags_from_tag_rules_count() {
    let out = explain(&["gray", "-s", "order"]);
    assert!(
        out.contains("1. lane gray: 2 ready (order-gray-0, order-v2-0)  <- serves"),
        "{out}"
    );
}

#[test]
fn an_unknown_lane_is_said_plainly() {
    assert_eq!(
        explain(&["nope"]),
        "No LaneRoute in namespace shop declares lane nope.\n"
    );
}
