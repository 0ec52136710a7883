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

#[test]
fn a_request_with_a_lane_header_is_followed_through_every_service_of_its_lane() {
    assert_eq!(
        explain(&[
            "--host",
            "shop.example.com",
            "--path",
            "/orders",
            "-H",
            "x-lane=dev-alice"
        ]),
        "A request to shop.example.com/orders with x-lane: dev-alice (namespace shop)\n\
         enters at LaneEntry shop-edge, rule 1 -> order:80\n\
         in lane dev-alice in namespace shop (LaneRoute dev-alice; falls back to: feature-x, baseline)\n\
         \n\
         SERVICE      ADDRESSED                       SOURCE              PODS\n\
         gateway-bff  gateway-bff--baseline-ea5b4bcb  Baseline            gateway-bff-0, gateway-bff-1\n\
         order        order--dev-alice-fed0f474       Lane                order-alice-0\n\
         pay          pay--baseline-a0b7a674          Baseline            pay-0, pay-1\n\
         user         user--feature-x-2a9cc7d5        Fallback:feature-x  user-feature-x-0\n"
    );
}

#[test]
fn a_request_in_no_lane_stays_on_baseline_but_for_the_lanes_weights() {
    assert_eq!(
        explain(&["--host", "shop.example.com"]),
        "A request to shop.example.com/ (namespace shop)\n\
         enters at LaneEntry shop-edge, rule 4 -> gateway-bff:80\n\
         in no lane: its Services' baseline (95% of such requests), or by weight: gray 5%.\n"
    );
}

#[test]
fn a_strict_lane_shows_the_service_whose_requests_get_no_endpoint() {
    let out = explain(&["--host", "shop.example.com", "-H", "x-lane=dev-bob"]);
    assert!(
        out.contains("pay          pay--dev-bob-c6900627           Empty     -\n"),
        "{out}"
    );
    assert!(
        out.contains("gateway-bff  gateway-bff--baseline-ea5b4bcb  Baseline"),
        "{out}"
    );
}

#[test]
fn a_request_for_another_host_enters_nowhere() {
    assert_eq!(
        explain(&["--host", "other.example.com"]),
        "A request to other.example.com/ (namespace shop)\nNo LaneEntry of the namespace takes it.\n"
    );
}

#[test]
fn the_longest_matching_path_prefix_picks_the_rule_as_at_a_gateway() {
    let out = explain(&[
        "--host",
        "shop.example.com",
        "--path",
        "/users/7",
        "-H",
        "x-lane=dev-alice",
    ]);
    assert!(
        out.contains("enters at LaneEntry shop-edge, rule 2 -> user:80\n"),
        "{out}"
    );
    let out = explain(&["--host", "shop.example.com", "--path", "/usersettings"]);
    assert!(
        out.contains("rule 4 -> gateway-bff:80\n"),
        "a prefix matches whole segments: {out}"
    );
}

#[test]
fn a_preview_hostname_a_lane_link_and_a_lane_cookie_are_followed_in_the_gateways_order() {
    let lane_of = |out: &str| {
        out.lines()
            .find_map(|l| {
                l.strip_prefix("in lane ")
                    .and_then(|l| l.split(' ').next())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "none".to_owned())
    };
    let preview = explain(&[
        "--host",
        "dev-alice.preview.shop.example.com",
        "--path",
        "/orders",
        "-H",
        "x-lane=gray",
    ]);
    assert!(
        preview.contains("enters at LaneEntry shop-edge, rule 1 -> order:80\nby its preview hostname"),
        "{preview}"
    );
    assert_eq!(
        lane_of(&preview),
        "dev-alice",
        "the hostname over the header: {preview}"
    );
    let at_shop = |path: &str, headers: &[&str]| {
        let mut args = vec!["--host", "shop.example.com", "--path", path];
        for h in headers {
            args.extend(["-H", h]);
        }
        explain(&args)
    };
    let link = at_shop("/orders?lane=dev-alice", &["cookie: x-lane=feature-x"]);
    assert!(link.contains("by its lane link"), "{link}");
    assert_eq!(lane_of(&link), "dev-alice", "the link over the cookie: {link}");
    assert_eq!(
        lane_of(&at_shop("/orders?lane=dev-alice", &["x-lane=gray"])),
        "gray",
        "the header first"
    );
    let cookie = at_shop("/orders", &["cookie: session=1; x-lane=feature-x"]);
    assert!(cookie.contains("by its lane cookie"), "{cookie}");
    assert_eq!(lane_of(&cookie), "feature-x");
    assert_eq!(
        lane_of(&at_shop("/orders", &["cookie: xx-lane=feature-x"])),
        "none"
    );
    let cleared = at_shop("/orders?lane=", &["cookie: x-lane=feature-x"]);
    assert!(
        cleared.contains("in no lane: its Services' baseline; the lane link's clearing"),
        "{cleared}"
    );
}
