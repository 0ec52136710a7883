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

/// Where the API server refuses a list longer than its schema's `maxItems` (which
/// `validate_cel` does not check): each such list's path.
fn too_long(schema: &serde_json::Value, value: &serde_json::Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    match value {
        serde_json::Value::Array(items) => {
            if schema["maxItems"]
                .as_u64()
                .is_some_and(|max| items.len() as u64 > max)
            {
                out.push(format!("{path}: too many items"));
            }
            for (i, item) in items.iter().enumerate() {
                out.extend(too_long(&schema["items"], item, &format!("{path}[{i}]")));
            }
        }
        serde_json::Value::Object(fields) => {
            for (name, field) in fields {
                out.extend(too_long(
                    &schema["properties"][name],
                    field,
                    &format!("{path}.{name}"),
                ));
            }
        }
        _ => {}
    }
    out
}

/// What the API server would say of `obj`: its CEL rules' errors and its lists that are too long.
fn refusals<T: kube::CustomResourceExt + serde::Serialize>(obj: &T) -> String {
    let crd = serde_json::to_value(T::crd()).expect("a CRD serialises");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let value = serde_json::to_value(obj).expect("an object serialises");
    let mut out = too_long(schema, &value, "");
    out.push(errors(obj));
    out.retain(|e| !e.is_empty());
    out.join("; ")
}

fn lane_entry(spec: serde_json::Value) -> laneway::api::LaneEntry {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
        "metadata": {"name": "web", "namespace": NS}, "spec": spec,
    }))
    .expect("entry")
}

/// A gateway entry with lane header `header` and one rule with `matches`.
fn gateway_entry(header: &str, matches: serde_json::Value) -> laneway::api::LaneEntry {
    lane_entry(serde_json::json!({
        "parentRefs": [{"name": "public"}], "header": header,
        "rules": [{"matches": matches, "backend": {"service": "order", "port": 80}}],
    }))
}

/// A LaneRoute entered by `headers` (name, value).
fn matched_route(headers: &[(&str, &str)]) -> laneway::api::LaneRoute {
    let mut r = route("gray", &["order"], &[], false);
    r.spec.match_ = Some(laneway::api::LaneMatch {
        headers: headers
            .iter()
            .map(|(n, v)| laneway::api::HeaderMatch {
                name: (*n).into(),
                value: (*v).into(),
            })
            .collect(),
    });
    r
}

/// `n` distinct header or query matches named `{prefix}{i}`.
fn named(prefix: &str, n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| serde_json::json!({"name": format!("{prefix}{i}"), "value": "v"}))
        .collect()
}

#[test]
fn credential_cookie_and_forwarding_headers_are_no_lane_header() {
    let refused = [
        "authorization",
        "Authorization",
        "proxy-authorization",
        "cookie",
        "Cookie",
        "set-cookie",
        "Set-Cookie",
        "forwarded",
        "x-forwarded-for",
        "X-Forwarded-For",
        "x-forwarded-proto",
        "X-FORWARDED-HOST",
    ];
    for name in refused {
        let e = errors(&gateway_entry(name, serde_json::json!([])));
        assert!(
            e.contains("spec.header") && e.contains("Authorization, Cookie or Set-Cookie"),
            "{name}: {e}"
        );
        let e = errors(&matched_route(&[(name, "gray")]));
        assert!(
            e.contains("spec.match.headers[0].name") && e.contains("X-Forwarded-*"),
            "{name}: {e}"
        );
    }
    for name in ["x-lane", "x-user", "X-Env", "x-forwarded"] {
        assert_eq!(errors(&gateway_entry(name, serde_json::json!([]))), "", "{name}");
        assert_eq!(errors(&matched_route(&[(name, "gray")])), "", "{name}");
    }
}

#[test]
fn header_names_of_one_match_are_unique_case_insensitively() {
    let dup = matched_route(&[("x-user", "alice"), ("X-User", "bob")]);
    let e = errors(&dup);
    assert!(
        e.contains("spec.match.headers") && e.contains("header names must be unique"),
        "{e}"
    );
    assert_eq!(
        errors(&matched_route(&[("x-user", "alice"), ("x-team", "a")])),
        ""
    );

    let headers = serde_json::json!([{"name": "x-user", "value": "a"}, {"name": "X-USER", "value": "b"}]);
    let e = errors(&gateway_entry(
        "x-lane",
        serde_json::json!([{"headers": headers}]),
    ));
    assert!(
        e.contains("spec.rules[0].matches[0].headers") && e.contains("header names must be unique"),
        "{e}"
    );
    let query = serde_json::json!([{"name": "q", "value": "a"}, {"name": "q", "value": "b"}]);
    let e = errors(&gateway_entry(
        "x-lane",
        serde_json::json!([{"queryParams": query}]),
    ));
    assert!(e.contains("query parameter names must be unique"), "{e}");
    // Query parameter names are case-sensitive: `q` and `Q` are two.
    let query = serde_json::json!([{"name": "q", "value": "a"}, {"name": "Q", "value": "b"}]);
    assert_eq!(
        errors(&gateway_entry(
            "x-lane",
            serde_json::json!([{"queryParams": query}])
        )),
        ""
    );
}

#[test]
fn a_rule_matches_neither_the_lane_cookie_nor_the_lane_link() {
    let cookie = serde_json::json!([{"headers": [{"name": "Cookie", "value": "a=b"}]}]);
    let e = errors(&gateway_entry("x-lane", cookie));
    assert!(e.contains("must not match on Cookie"), "{e}");
    let link = |name: &str| serde_json::json!([{"queryParams": [{"name": name, "value": "v"}]}]);
    let e = errors(&gateway_entry("x-lane", link("lane")));
    assert!(
        e.contains("spec.rules") && e.contains("lane link's query parameter"),
        "{e}"
    );
    let mut own = gateway_entry("x-lane", link("env"));
    own.spec.lane_query = Some("env".into());
    assert!(errors(&own).contains("lane link's query parameter"));
    own.spec.lane_query = Some("lane-link".into());
    assert_eq!(errors(&own), "");
}

/// The largest match laneway builds adds to a rule's headers a lane's `match.headers` and the
/// lane cookie's match, and to its query parameters the lane link's: within the Gateway API's 16.
#[test]
fn header_and_query_counts_stop_where_a_route_match_would_pass_16() {
    use laneway::api::{LaneEntry, LaneRoute};
    let lane = max_items::<LaneRoute>(&["spec", "match", "headers"]);
    let rule = ["spec", "rules", "[]", "matches", "[]"];
    let rule_headers = max_items::<LaneEntry>(&[&rule[..], &["headers"]].concat());
    let rule_query = max_items::<LaneEntry>(&[&rule[..], &["queryParams"]].concat());
    let (most_headers, most_query) = (lane + rule_headers + 1, rule_query + 1);
    assert!(most_headers <= GATEWAY_MATCH_LIMIT, "{lane} + {rule_headers} + 1");
    assert!(most_query <= GATEWAY_MATCH_LIMIT, "{rule_query} + 1");

    let headers =
        |n: usize| -> Vec<(String, String)> { (0..n).map(|i| (format!("x-h{i}"), "v".to_owned())).collect() };
    let route_of = |n: usize| {
        let h = headers(n);
        let pairs: Vec<(&str, &str)> = h.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        refusals(&matched_route(&pairs))
    };
    assert_eq!(route_of(lane), "");
    assert!(
        route_of(lane + 1).contains(".spec.match.headers: too many"),
        "{}",
        route_of(lane + 1)
    );

    let entry_of = |h: usize, q: usize| {
        let m = serde_json::json!([{"headers": named("x-u", h), "queryParams": named("q", q)}]);
        refusals(&gateway_entry("x-lane", m))
    };
    assert_eq!(entry_of(rule_headers, rule_query), "");
    let e = entry_of(rule_headers + 1, rule_query);
    assert!(e.contains(".spec.rules[0].matches[0].headers: too many"), "{e}");
    let e = entry_of(rule_headers, rule_query + 1);
    assert!(
        e.contains(".spec.rules[0].matches[0].queryParams: too many"),
        "{e}"
    );
}

#[test]
fn no_lane_is_named_baseline() {
    use laneway::lanes::BASELINE;
    let message = "must not be named baseline";
    let mut named_lane = route("gray", &["order"], &[], false);
    named_lane.spec.lane = Some(BASELINE.into());
    let e = errors(&named_lane);
    assert!(e.contains("spec.lane") && e.contains(message), "{e}");

    let by_name = route(BASELINE, &["order"], &[], false);
    let e = errors(&by_name);
    assert!(e.contains("spec.lane") && e.contains(message), "{e}");
    let mut renamed = by_name.clone();
    renamed.spec.lane = Some("gray".into());
    assert_eq!(
        errors(&renamed),
        "",
        "a LaneRoute named baseline may declare another lane"
    );

    let e = errors(&route("gray", &["order"], &[BASELINE], false));
    assert!(e.contains("spec.fallback") && e.contains(message), "{e}");

    let tag = tag_rule("order", "order", &[(BASELINE, &[("v", "2")])], None);
    let e = errors(&tag);
    assert!(e.contains("spec.tags[0].name") && e.contains(message), "{e}");
    for lane in ["Baseline", "baseline-2", "gray"] {
        assert_eq!(
            errors(&tag_rule("order", "order", &[(lane, &[("v", "2")])], None)),
            "",
            "{lane}"
        );
    }
}

/// The LaneRoute `gray` with `spec.rpcEntry` set to `rpc`.
fn rpc_route(rpc: serde_json::Value) -> laneway::api::LaneRoute {
    let mut r = route("gray", &["order"], &[], false);
    r.spec.rpc_entry = Some(serde_json::from_value(rpc).expect("rpcEntry"));
    r
}

#[test]
fn rpc_entry_conditions_take_dubbo_condition_values() {
    let good = rpc_route(serde_json::json!({
        "sticky": {"attachment": "user_id", "header": "x-user-id"},
        "conditions": [
            {"attachment": "user_id", "values": "1~100"},
            {"argument": 0, "values": "vip,gold-*"},
            {"header": "x-tenant", "values": "-5~5,acme"},
        ],
    }));
    assert_eq!(errors(&good), "");
    for bad in [
        "1~",
        "~5",
        "a~b",
        "1~2~3",
        "vip,,gold",
        "vip, gold",
        ",vip",
        "vip,",
    ] {
        let r = rpc_route(serde_json::json!({"conditions": [{"attachment": "user_id", "values": bad}]}));
        assert!(
            errors(&r).contains("comma-separated list of values"),
            "{bad}: {}",
            errors(&r)
        );
    }
    for reversed in ["100~1", "vip,5~-5", "-1~-2"] {
        let r = rpc_route(serde_json::json!({"conditions": [{"argument": 1, "values": reversed}]}));
        assert!(
            errors(&r).contains("a range must run from low to high"),
            "{reversed}: {}",
            errors(&r)
        );
    }
}

#[test]
fn an_rpc_condition_names_exactly_one_thing_and_keys_are_attachment_keys() {
    let both = rpc_route(
        serde_json::json!({"conditions": [{"attachment": "user_id", "header": "x-user", "values": "1"}]}),
    );
    assert!(errors(&both).contains("exactly one of attachment, argument and header"));
    let none = rpc_route(serde_json::json!({"conditions": [{"values": "1"}]}));
    assert!(errors(&none).contains("exactly one of attachment, argument and header"));
    let dotted =
        rpc_route(serde_json::json!({"conditions": [{"attachment": "dubbo.tag", "values": "gray"}]}));
    assert!(
        errors(&dotted).contains("attachment key of letters"),
        "{}",
        errors(&dotted)
    );
    let empty_sticky = rpc_route(serde_json::json!({"sticky": {}}));
    assert!(errors(&empty_sticky).contains("sticky needs an attachment or a header"));
    let header = rpc_route(serde_json::json!({"sticky": {"header": "x user"}}));
    assert!(errors(&header).contains("must be an HTTP header name"));
}
