//! Invalid and hostile input, as a table: each case is refused by the API server with a message
//! that names the field, or accepted and reported in status naming the field, while another
//! namespace keeps being served.

mod cluster;
mod gateway;

use std::time::{Duration, Instant};

use futures::StreamExt;

use cluster::*;
use gateway::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use laneway::api::{Condition, ConditionStatus, ConditionType, LaneEntry, TagRule};
use laneway::gateway::HttpRoute;
use serde_json::json;

fn lane_route(name: &str, spec: &str) -> String {
    format!("apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

fn lane_entry(name: &str, spec: &str) -> String {
    format!("apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

fn tag_rule(name: &str, spec: &str) -> String {
    format!("apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

/// A TagRule over every pod whose `spec.dubbo` holds `dubbo`.
fn dubbo_rule(dubbo: &str) -> String {
    tag_rule("t", &format!("  selector: {{}}\n  dubbo: {{{dubbo}}}\n"))
}

/// A gateway rule sending everything to `order`.
const TO_ORDER: &str = "{backend: {service: order, port: 80}}";

/// A LaneEntry at the Gateway `gw` with `fields` and `rules` (a YAML flow sequence's items).
fn gateway_entry(fields: &str, rules: &str) -> String {
    lane_entry(
        "e",
        &format!("  parentRefs: [{{name: gw}}]\n{fields}  rules: [{rules}]\n"),
    )
}

/// Input the API server must refuse, with the field its message must name.
fn refused_at_apply() -> Vec<(&'static str, String, &'static str)> {
    let many: Vec<String> = (0..10_000).map(|i| format!("svc-{i}")).collect();
    let long = "x".repeat(64);
    vec![
        ("a lane name with '|'", lane_route("r", "  lane: \"a|b\"\n  services: [order]\n"), "spec.lane"),
        ("a lane name of 64 characters", lane_route("r", &format!("  lane: {long}\n  services: [order]\n")), "spec.lane"),
        ("a unicode lane name", lane_route("r", "  lane: 灰度\n  services: [order]\n"), "spec.lane"),
        ("a lane name that is empty", lane_route("r", "  lane: \"\"\n  services: [order]\n"), "spec.lane"),
        ("a lane falling back to itself", lane_route("gray", "  services: [order]\n  fallback: [gray]\n"), "spec.fallback"),
        ("the same fallback twice", lane_route("r", "  services: [order]\n  fallback: [x, x]\n"), "spec.fallback"),
        ("a fallback lane with '|'", lane_route("r", "  services: [order]\n  fallback: [\"a|b\"]\n"), "spec.fallback"),
        (
            "17 fallback lanes",
            lane_route("r", &format!("  services: [order]\n  fallback: [{}]\n", (0..17).map(|i| format!("f{i}")).collect::<Vec<_>>().join(", "))),
            "spec.fallback",
        ),
        ("weight 101", lane_route("r", "  services: [order]\n  weight: 101\n"), "spec.weight"),
        ("weight -1", lane_route("r", "  services: [order]\n  weight: -1\n"), "spec.weight"),
        ("a ttl that is no duration", lane_route("r", "  services: [order]\n  ttl: soon\n"), "spec.ttl"),
        ("a ttl of 20 digits", lane_route("r", "  services: [order]\n  ttl: 99999999999999999999h\n"), "spec.ttl"),
        ("both services and serviceSelector", lane_route("r", "  services: [order]\n  serviceSelector: {}\n"), "spec.services"),
        ("neither services nor serviceSelector", lane_route("r", "  strict: true\n"), "spec.services"),
        (
            "RPC entry values with an empty item",
            lane_route("r", "  services: [order]\n  rpcEntry: {conditions: [{attachment: user_id, values: \"1,,2\"}]}\n"),
            "spec.rpcEntry.conditions[0].values",
        ),
        (
            "an RPC entry range without an end",
            lane_route("r", "  services: [order]\n  rpcEntry: {conditions: [{attachment: user_id, values: \"1~\"}]}\n"),
            "spec.rpcEntry.conditions[0].values",
        ),
        (
            "an RPC condition on an attachment and a header",
            lane_route("r", "  services: [order]\n  rpcEntry: {conditions: [{attachment: u, header: x-u, values: a}]}\n"),
            "spec.rpcEntry.conditions[0]",
        ),
        (
            "an RPC condition on a dotted attachment key",
            lane_route("r", "  services: [order]\n  rpcEntry: {conditions: [{attachment: dubbo.tag, values: gray}]}\n"),
            "spec.rpcEntry.conditions[0].attachment",
        ),
        (
            "an RPC condition on argument 300",
            lane_route("r", "  services: [order]\n  rpcEntry: {conditions: [{argument: 300, values: vip}]}\n"),
            "spec.rpcEntry.conditions[0].argument",
        ),
        ("a sticky key with nothing to hash", lane_route("r", "  services: [order]\n  rpcEntry: {sticky: {}}\n"), "spec.rpcEntry.sticky"),
        ("a 10,000-service LaneRoute", lane_route("r", &format!("  services: [{}]\n", many.join(", "))), "spec.services"),
        ("a Service name with upper case", lane_route("r", "  services: [Order_Svc]\n"), "spec.services[0]"),
        ("a Service name of 64 characters", lane_route("r", &format!("  services: [{long}]\n")), "spec.services[0]"),
        (
            "a header name with a space",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: \"x lane\", value: gray}]}\n"),
            "spec.match.headers[0].name",
        ),
        (
            "an empty header value",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: x-lane, value: \"\"}]}\n"),
            "spec.match.headers[0].value",
        ),
        (
            "two tags of one name",
            tag_rule("t", "  selector: {}\n  tags: [{name: gray, podSelector: {}}, {name: gray, podSelector: {}}]\n"),
            "spec.tags",
        ),
        ("a tag name with '|'", tag_rule("t", "  selector: {}\n  tags: [{name: \"a|b\", podSelector: {}}]\n"), "spec.tags[0].name"),
        ("a unicode tag name", tag_rule("t", "  selector: {}\n  tags: [{name: 灰度, podSelector: {}}]\n"), "spec.tags[0].name"),
        (
            "65 tags",
            tag_rule(
                "t",
                &format!(
                    "  selector: {{}}\n  tags: [{}]\n",
                    (0..65).map(|i| format!("{{name: t{i}, podSelector: {{}}}}")).collect::<Vec<_>>().join(", ")
                ),
            ),
            "spec.tags",
        ),
        ("both dubbo.port and dubbo.portName", dubbo_rule("application: app, port: 20880, portName: dubbo"), "spec.dubbo"),
        ("neither dubbo.port nor dubbo.portName", dubbo_rule("application: app"), "spec.dubbo"),
        ("dubbo.port 0", dubbo_rule("application: app, port: 0"), "spec.dubbo.port"),
        ("dubbo.port 70000", dubbo_rule("application: app, port: 70000"), "spec.dubbo.port"),
        ("an application escaping the znode path", dubbo_rule("application: ../../zookeeper/quota, port: 20880"), "spec.dubbo.application"),
        ("an application starting with a dot", dubbo_rule("application: .hidden, port: 20880"), "spec.dubbo.application"),
        ("a unicode application", dubbo_rule("application: 订单, port: 20880"), "spec.dubbo.application"),
        ("an application of 201 characters", dubbo_rule(&format!("application: {}, port: 20880", "a".repeat(201))), "spec.dubbo.application"),
        ("a portName of 16 characters", dubbo_rule("application: app, portName: abcdefghijklmnop"), "spec.dubbo.portName"),
        ("both nacos.port and nacos.portName", tag_rule("t", "  selector: {}\n  nacos: {service: order, port: 8080, portName: web}\n"), "spec.nacos"),
        ("a nacos laneKey of laneway.lanes", tag_rule("t", "  selector: {}\n  nacos: {service: order, laneKey: laneway.lanes}\n"), "spec.nacos.laneKey"),
        ("a nacos service with a slash", tag_rule("t", "  selector: {}\n  nacos: {service: a/b}\n"), "spec.nacos.service"),
        ("a nacos rule without a service", tag_rule("t", "  selector: {}\n  nacos: {group: G}\n"), "spec.nacos.service"),
        ("an entry with neither a gateway nor a mesh", lane_entry("e", "  header: x-lane\n"), "spec.parentRefs"),
        ("an entry at a gateway and in a mesh", gateway_entry("  mesh: {services: [order]}\n", TO_ORDER), "spec.parentRefs"),
        ("gateway rules without a gateway", lane_entry("e", "  mesh: {services: [order]}\n  rules: [{backend: {service: order, port: 80}}]\n"), "spec.rules"),
        ("a gateway without rules", lane_entry("e", "  parentRefs: [{name: gw}]\n"), "spec.rules"),
        ("hostnames in a mesh", lane_entry("e", "  mesh: {services: [order]}\n  hostnames: [shop.example.com]\n"), "spec.hostnames"),
        ("weights in a mesh", lane_entry("e", "  mesh: {services: [order]}\n  applyWeights: true\n"), "spec.applyWeights"),
        ("both mesh.services and mesh.serviceSelector", lane_entry("e", "  mesh: {services: [order], serviceSelector: {}}\n"), "spec.mesh"),
        ("a hostname with upper case", gateway_entry("  hostnames: [Shop.Example.com]\n", TO_ORDER), "spec.hostnames[0]"),
        (
            "preview hostnames without hostnames",
            gateway_entry("  previewHostnames: [\"{lane}.preview.example.com\"]\n", TO_ORDER),
            "spec.previewHostnames",
        ),
        (
            "a preview hostname without {lane}",
            gateway_entry("  hostnames: [shop.example.com]\n  previewHostnames: [preview.example.com]\n", TO_ORDER),
            "spec.previewHostnames",
        ),
        (
            "a preview hostname with {lane} twice",
            gateway_entry("  hostnames: [shop.example.com]\n  previewHostnames: [\"{lane}.{lane}.example.com\"]\n", TO_ORDER),
            "spec.previewHostnames",
        ),
        (
            "a wildcard preview hostname",
            gateway_entry("  hostnames: [shop.example.com]\n  previewHostnames: [\"*.{lane}.example.com\"]\n", TO_ORDER),
            "spec.previewHostnames[0]",
        ),
        (
            "a preview hostname that is no hostname once filled in",
            gateway_entry("  hostnames: [shop.example.com]\n  previewHostnames: [\"{lane}..example.com\"]\n", TO_ORDER),
            "spec.previewHostnames",
        ),
        ("a sticky gray in a mesh", lane_entry("e", "  mesh: {services: [order]}\n  stickyGray: cookie\n"), "spec.stickyGray"),
        ("a sticky gray that is not a cookie", gateway_entry("  stickyGray: session\n", TO_ORDER), "spec.stickyGray"),
        ("a lane link query in a mesh", lane_entry("e", "  mesh: {services: [order]}\n  laneQuery: lane\n"), "spec.laneQuery"),
        ("a lane link query with '='", gateway_entry("  laneQuery: \"lane=\"\n", TO_ORDER), "spec.laneQuery"),
        ("a lane header with a colon", gateway_entry("  header: \"x-lane:\"\n", TO_ORDER), "spec.header"),
        ("a pseudo-header as the lane header", gateway_entry("  header: \":authority\"\n", TO_ORDER), "spec.header"),
        ("Host as the lane header", gateway_entry("  header: Host\n", TO_ORDER), "spec.header"),
        ("Content-Length as the lane header", gateway_entry("  header: content-length\n", TO_ORDER), "spec.header"),
        ("Transfer-Encoding as the lane header", gateway_entry("  header: Transfer-Encoding\n", TO_ORDER), "spec.header"),
        ("Connection as the lane header", gateway_entry("  header: Connection\n", TO_ORDER), "spec.header"),
        ("a Proxy- header as the lane header", gateway_entry("  header: Proxy-Authorization\n", TO_ORDER), "spec.header"),
        ("Authorization as the lane header", gateway_entry("  header: authorization\n", TO_ORDER), "spec.header"),
        ("Cookie as the lane header", gateway_entry("  header: Cookie\n", TO_ORDER), "spec.header"),
        (
            "X-Forwarded-For entering a lane",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: X-Forwarded-For, value: gray}]}\n"),
            "spec.match.headers[0].name",
        ),
        (
            "one header twice entering a lane",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: x-user, value: a}, {name: X-User, value: b}]}\n"),
            "spec.match.headers",
        ),
        (
            "9 headers entering a lane",
            lane_route(
                "r",
                &format!(
                    "  services: [order]\n  match: {{headers: [{}]}}\n",
                    (0..9).map(|i| format!("{{name: x-h{i}, value: v}}")).collect::<Vec<_>>().join(", ")
                ),
            ),
            "spec.match.headers",
        ),
        (
            "one header twice in a rule's match",
            gateway_entry("", "{matches: [{headers: [{name: x-user, value: a}, {name: X-USER, value: b}]}], backend: {service: order, port: 80}}"),
            "spec.rules[0].matches[0].headers",
        ),
        (
            "8 headers in a rule's match",
            gateway_entry(
                "",
                &format!(
                    "{{matches: [{{headers: [{}]}}], backend: {{service: order, port: 80}}}}",
                    (0..8).map(|i| format!("{{name: x-h{i}, value: v}}")).collect::<Vec<_>>().join(", ")
                ),
            ),
            "spec.rules[0].matches[0].headers",
        ),
        (
            "a rule matching on the lane link's query parameter",
            gateway_entry("", "{matches: [{queryParams: [{name: lane, value: gray}]}], backend: {service: order, port: 80}}"),
            "spec.rules",
        ),
        ("a lane named baseline", lane_route("r", "  lane: baseline\n  services: [order]\n"), "spec.lane"),
        ("a LaneRoute named baseline without spec.lane", lane_route("baseline", "  services: [order]\n"), "spec.lane"),
        ("a fallback lane named baseline", lane_route("r", "  services: [order]\n  fallback: [baseline]\n"), "spec.fallback"),
        ("a tag named baseline", tag_rule("t", "  selector: {}\n  tags: [{name: baseline, podSelector: {}}]\n"), "spec.tags[0].name"),
        (
            "a hop-by-hop header entering a lane",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: Keep-Alive, value: gray}]}\n"),
            "spec.match.headers[0].name",
        ),
        (
            "a header value with CR LF",
            lane_route("r", "  services: [order]\n  match: {headers: [{name: x-lane, value: \"gray\\r\\nX-Admin: 1\"}]}\n"),
            "spec.match.headers[0].value",
        ),
        (
            "a rule's header value with a NUL",
            gateway_entry("", "{matches: [{headers: [{name: x-user, value: \"a\\0b\"}]}], backend: {service: order, port: 80}}"),
            "spec.rules[0].matches[0].headers[0].value",
        ),
        ("a path not starting with /", gateway_entry("", "{matches: [{path: {value: api}}], backend: {service: order, port: 80}}"), "spec.rules[0].matches[0].path.value"),
        ("a backend port 0", gateway_entry("", "{backend: {service: order, port: 0}}"), "spec.rules[0].backend.port"),
        ("17 rules", gateway_entry("", &[TO_ORDER; 17].join(", ")), "spec.rules"),
        (
            "a pod label value of 64 characters",
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: {{laneway.io/lane: {long}}}}}\nspec: {{containers: [{{name: c, image: x}}]}}\n"),
            "metadata.labels",
        ),
        (
            "a Service port out of range",
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {app: s}, ports: [{port: 70000}]}\n".into(),
            "spec.ports[0].port",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_input_is_refused_at_apply_naming_the_field() {
    let c = cluster("refused").await;
    let cases = refused_at_apply();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for (what, yaml, field) in cases {
        match c.apply_yaml(&yaml).await {
            Ok(()) => panic!("{what}: accepted"),
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains(field),
                    "{what}: the message does not name {field}: {message}"
                );
            }
        }
    }
}

/// Every condition as `reason: message`, so that a test can look for the field a message names.
fn problems(conditions: &[Condition]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}: {}", c.reason, c.message))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The TagRule's status messages (Degraded or Stalled name the field).
async fn rule_problem(c: &Cluster, name: &str) -> String {
    let rule = c.api::<TagRule>().get(name).await.ok();
    problems(
        &rule
            .and_then(|r| r.status)
            .map(|s| s.conditions)
            .unwrap_or_default(),
    )
}

async fn route_problem(c: &Cluster, name: &str) -> String {
    problems(&route_status_conditions(c, name).await)
}

#[tokio::test(flavor = "multi_thread")]
async fn what_only_the_controller_can_see_is_reported_and_other_namespaces_are_served() {
    let c = cluster("hostile").await;
    let good = cluster("hostile-good").await;
    shop(&c).await;
    let _op = c
        .operator_watching("lease", &[&c.ns, &good.ns], &["--rule-grace", "1s"])
        .await;

    // Each case: the object, then (kind, name, words its status must contain).
    let cycle: Vec<String> = (0..50)
        .map(|i| {
            lane_route(
                &format!("c{i}"),
                &format!("  services: [order]\n  fallback: [c{}]\n", (i + 1) % 50),
            )
        })
        .collect();
    for r in &cycle {
        c.apply_yaml(r).await.expect("cycle route");
    }
    let objects = [
        lane_route("ghost", "  services: [nope]\n"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: manual}\nspec: {ports: [{port: 80}]}\n".into(),
        lane_route("manual", "  services: [manual]\n"),
        lane_route("near", "  serviceSelector: {matchExpressions: [{key: tier, operator: Near}]}\n"),
        lane_route("twin-a", "  lane: twin\n  services: [order]\n"),
        lane_route("twin-b", "  lane: twin\n  services: [order]\n"),
        tag_rule("conflict", "  selector: {matchLabels: {app: order}}\n  tags: [{name: feature-x, podSelector: {matchLabels: {laneway.io/lane: gray}}}]\n"),
        tag_rule("dup-1", "  selector: {matchLabels: {app: user}}\n  dubbo: {application: same-app, port: 20880}\n"),
        tag_rule("dup-2", "  selector: {matchLabels: {app: pay}}\n  dubbo: {application: same-app, port: 20880}\n"),
        tag_rule("grpc", "  selector: {matchLabels: {app: order}}\n  dubbo: {application: grpc-app, portName: grpc}\n"),
        tag_rule("spring", "  selector: {matchLabels: {app: order}}\n  nacos: {service: order-service}\n"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: weird}\nspec: {selector: {app: order}, ports: [{name: web, port: 80, targetPort: nope}]}\n".into(),
        lane_route("weird", "  services: [weird]\n"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: dns-only}\nspec: {clusterIP: None, selector: {app: pay}}\n".into(),
        lane_route("dns-only", "  services: [dns-only]\n"),
    ];
    for o in &objects {
        c.apply_yaml(o).await.expect("accepted object");
    }
    // A pod with no IP yet (no kubelet reported one).
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pay-noip", "labels": {"app": "pay"}},
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}});
    c.api::<Pod>()
        .create(&PostParams::default(), &serde_json::from_value(pod).expect("pod"))
        .await
        .expect("pod");

    // Meanwhile another namespace is served as usual.
    shop(&good).await;
    let started = Instant::now();
    good.apply_yaml(&lane_route("gray", "  services: [order]\n"))
        .await
        .expect("route");
    wait_for("the healthy namespace's lane", names(&["order-gray"]), || {
        good.lane_pods("order", "gray")
    })
    .await;
    eprintln!("healthy namespace served in {:?}", started.elapsed());

    let expectations: [(&str, &str, &[&str]); 10] = [
        ("route", "c0", &["FallbackCycle", "spec.fallback", "c0 -> c1"]),
        ("route", "ghost", &["UnknownService", "spec.services", "nope"]),
        ("route", "manual", &["ServiceWithoutSelector", "spec.services"]),
        ("route", "near", &["InvalidSelector", "spec.serviceSelector"]),
        ("route", "twin-b", &["DuplicateLane", "spec.lane"]),
        (
            "rule",
            "conflict",
            &["ConflictingTags", "spec.tags", "order-gray"],
        ),
        (
            "rule",
            "dup-2",
            &["DuplicateApplication", "spec.dubbo.application"],
        ),
        ("rule", "grpc", &["DubboPortMissing", "spec.dubbo.portName"]),
        (
            "rule",
            "spring",
            &["NacosNotConfigured", "spec.nacos", "--nacos-addr"],
        ),
        ("route", "weird", &["UnresolvedTargetPort", "targetPort \"nope\""]),
    ];
    for (kind, name, words) in expectations {
        eventually(&format!("{kind} {name} reports {words:?}"), || async {
            let text = if kind == "route" {
                route_problem(&c, name).await
            } else {
                rule_problem(&c, name).await
            };
            words.iter().all(|w| text.contains(w))
        })
        .await;
    }
    // Handled without complaint: a portless headless Service is laned (DNS only), a pod with no
    // IP is left out of every slice.
    wait_for("the portless lane", names(&["pay-1"]), || {
        c.baseline_pods("dns-only")
    })
    .await;
    assert!(!c
        .baseline_pods("pay")
        .await
        .unwrap_or_default()
        .contains(&"pay-noip".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_set_past_the_configmap_limit_is_reported_and_the_rest_keeps_working() {
    let c = cluster("big-rules").await;
    c.service("order").await;
    // 850 pods, each under 64 tags with long names: the rule passes 1 MiB.
    let tags: Vec<String> = (0..64)
        .map(|i| format!("{{name: {}{i:02}, podSelector: {{}}}}", "t".repeat(61)))
        .collect();
    let pods = c.api::<Pod>();
    let creates = (0..850u32).map(|i| {
        let pods = pods.clone();
        async move {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("big-{i}"), "labels": {"app": "order"}},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}});
            pods.create(&PostParams::default(), &serde_json::from_value(pod).expect("pod")).await.expect("pod");
            let ip = format!("10.50.{}.{}", i / 250, i % 250 + 1);
            let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True"}]}});
            pods.patch_status(&format!("big-{i}"), &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("status");
        }
    });
    futures::stream::iter(creates)
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let op = c.operator_with("lease", &[]).await;
    c.apply_yaml(&tag_rule(
        "small",
        "  selector: {matchLabels: {app: none}}\n  dubbo: {application: small-app, port: 20880}\n",
    ))
    .await
    .expect("small rule");
    c.apply_yaml(&tag_rule(
        "big",
        &format!("  selector: {{matchLabels: {{app: order}}}}\n  tags: [{}]\n  dubbo: {{application: big-app, port: 20880}}\n", tags.join(", ")),
    ))
    .await
    .expect("big rule");
    eventually("the ConfigMap's refusal is in the TagRule status", || async {
        let Ok(rule) = c.api::<TagRule>().get("big").await else {
            return false;
        };
        rule.status.is_some_and(|s| {
            s.publications.iter().any(|p| {
                p.centre == "configmap" && p.last_error.as_deref().is_some_and(|e| e.contains("Too long"))
            })
        })
    })
    .await;
    assert!(
        rule_problem(&c, "big").await.contains("Retrying: configmap"),
        "{}",
        rule_problem(&c, "big").await
    );
    // The other rule is published, and the refused one is not sent again and again.
    eventually("the small rule is published", || async {
        c.dubbo_rules().await.contains_key("small-app.tag-router")
    })
    .await;
    let before = op.metric("laneway_publishes_total", "result=\"error\"").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        op.metric("laneway_publishes_total", "result=\"error\"").await,
        before,
        "the refused rule was sent again"
    );
}

// A route the API server refuses: the lane at fault is left out alone, and retried with back-off.

/// A ValidatingAdmissionPolicy (CEL, in the API server) refusing, in the test's namespace, every
/// HTTPRoute for which `expression` is false; returns its name (and its binding's) once `probe`
/// (an HTTPRoute) is refused.
async fn refuse_routes(c: &Cluster, expression: &str, probe: &str) -> String {
    let name = format!("refuse-routes-{}", c.ns);
    let rule = "{apiGroups: [gateway.networking.k8s.io], apiVersions: [\"*\"], operations: [CREATE, UPDATE], resources: [httproutes]}";
    let validation = format!("{{expression: {expression:?}, message: refused by policy {name}}}");
    c.refuse_by_policy(&name, rule, &validation).await;
    let routes: kube::Api<HttpRoute> = c.api();
    // The API server enforces a new policy once its informers have it.
    eventually("the policy is enforced", || async {
        let refused = c.apply_yaml(probe).await.is_err();
        if !refused {
            let _ = routes.delete("probe", &Default::default()).await;
        }
        refused
    })
    .await;
    name
}

/// Lines of the operator's log that contain `words`.
fn log_lines(op: &Operator, words: &str) -> usize {
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    log.lines().filter(|l| l.contains(words)).count()
}

/// LaneEntry `e{i}` at the Gateway `gw`, for host `e{i}.{domain}`.
fn numbered_entry(i: usize, domain: &str) -> String {
    let spec = format!("  parentRefs: [{{name: gw}}]\n  hostnames: [e{i}.{domain}]\n  rules: [{TO_ORDER}]\n");
    lane_entry(&format!("e{i}"), &spec)
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_routes_are_retried_with_back_off_and_hold_nothing_else_back() {
    let c = cluster("refused-backoff").await;
    shop(&c).await;
    gateway::install_crds(&c.client).await;
    let probe = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: probe}\nspec: {rules: [{}]}\n";
    refuse_routes(&c, "false", probe).await;
    let op = c.operator_with("lease", &[]).await;
    c.apply_route("gray", &["order"], &[], false).await;
    for i in 0..4 {
        c.apply_yaml(&numbered_entry(i, "example.com"))
            .await
            .expect("entry");
    }
    let failed = || op.metric("laneway_errors_total", "step=\"apply\"");
    eventually("each entry's route is refused", || async {
        failed().await >= 4.0
    })
    .await;
    let refused = Instant::now();
    eventually("the entries read Stalled at once", || async {
        let entries = c
            .api::<LaneEntry>()
            .list(&Default::default())
            .await
            .expect("entries");
        entries.items.iter().all(|e| {
            e.status.iter().flat_map(|s| &s.conditions).any(|c| {
                c.type_ == ConditionType::Stalled
                    && c.status == ConditionStatus::True
                    && c.reason == "WriteRejected"
            })
        })
    })
    .await;
    // Back-off from 100 ms doubling to 30 s: by 30 s each route is past its 12.8 s step, so
    // each is tried at most twice in the next 30 s.
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(refused.elapsed())).await;
    let (writes, lines) = (failed().await, log_lines(&op, "write failed"));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let writes = failed().await - writes;
    let lines = log_lines(&op, "write failed") - lines;
    eprintln!(
        "four refused routes, 30 s to 60 s after the refusal: {writes} failed writes, {lines} log lines"
    );
    assert!(writes <= 8.0, "{writes} failed writes in 30 s");
    assert!(
        lines as f64 <= writes,
        "{lines} log lines for {writes} failed writes"
    );

    // Right after a route is tried again (its next try is over 12 s away), a pod changes: its
    // slice is written at once, whatever the routes' back-off.
    let before = failed().await;
    eventually_within("a route is tried again", Duration::from_secs(40), || async {
        failed().await > before
    })
    .await;
    let relabelled = Instant::now();
    c.label_pod("order-2", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "the relabelled pod reaches its lane",
        names(&["order-2", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    let took = relabelled.elapsed();
    assert!(took < Duration::from_secs(5), "the pod's slice waited {took:?}");
    // A refused route whose content changes is tried again at once.
    let before = failed().await;
    c.apply_yaml(&numbered_entry(0, "example.org"))
        .await
        .expect("entry");
    eventually_within(
        "the changed route is tried at once",
        Duration::from_secs(5),
        || async { failed().await > before },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_whose_route_is_refused_is_left_out_alone_and_its_neighbour_keeps_its_traffic() {
    let c = cluster("refused-lane").await;
    let traefik = gateway::Traefik::start(&c.client, &c.ns).await;
    let backends = gateway::Backends::start();
    c.apply_yaml("apiVersion: v1\nkind: Service\nmetadata: {name: order}\nspec:\n  selector: {app: order}\n  ports: [{name: http, port: 80, targetPort: http}]\n")
        .await
        .expect("service");
    for (i, (pod, lane)) in [
        ("order-1", None),
        ("order-ok", Some("ok")),
        ("order-bad", Some("bad")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = gateway::Backend::new(pod, "order", gateway::POD_IPS[i]);
        if let Some(lane) = lane {
            b = b.lane(lane);
        }
        backends.deploy(&c.client, &c.ns, &b).await;
    }
    // The API server refuses every HTTPRoute that matches a header on the value `bad`.
    let policy = "!has(object.spec.rules) || !object.spec.rules.exists(r, has(r.matches) && r.matches.exists(m, has(m.headers) && m.headers.exists(h, h.value == 'bad')))";
    let probe = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: probe}\nspec: {rules: [{matches: [{headers: [{name: x-lane, value: bad}]}]}]}\n";
    let policy = refuse_routes(&c, policy, probe).await;
    c.apply_route("ok", &["order"], &[], false).await;
    c.apply_route("bad", &["order"], &[], false).await;
    let entry = json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry", "metadata": {"name": "web"},
        "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": ["order"], "rules": [{"backend": {"service": "order", "port": 80}}]}});
    c.apply_yaml(&entry.to_string()).await.expect("entry");
    let _op = c.operator_with("lease", &[]).await;

    let http = traefik.http();
    let ok = gateway::Request::new("order").lane("ok");
    http.wait_for("lane ok is served by its pod", &ok, |r| {
        r.first_hop() == Some("order-ok")
    })
    .await;
    let bad = gateway::Request::new("order").lane("bad");
    let answer = http.get(&bad).await.expect("answer");
    assert_eq!(
        answer.first_hop(),
        Some("order-1"),
        "lane bad is left out: baseline serves it"
    );
    let routed = |name: &'static str| {
        let c = &c;
        async move {
            let conditions = route_status_conditions(c, name).await;
            let routed = conditions.into_iter().find(|c| c.type_ == ConditionType::Routed);
            routed
                .map(|r| (format!("{:?}", r.status), r.reason, r.message))
                .unwrap_or_default()
        }
    };
    eventually(
        "lane bad reads Routed=False, WriteRejected, with the API server's message",
        || async {
            let (status, reason, message) = routed("bad").await;
            status == "False" && reason == "WriteRejected" && message.contains("refused by policy")
        },
    )
    .await;
    assert_eq!(routed("ok").await.0, "True", "lane ok is routed");
    let stalled = route_status_conditions(&c, "bad")
        .await
        .into_iter()
        .find(|c| c.type_ == ConditionType::Stalled);
    assert_eq!(
        stalled.map(|s| (s.status, s.reason)),
        Some((ConditionStatus::True, "WriteRejected".into()))
    );
    eventually("and a Warning Event says so", || async {
        c.events_for("bad")
            .await
            .iter()
            .any(|e| e.starts_with("WriteRejected") && e.contains("refused by policy"))
    })
    .await;

    // Once the API server takes it, the lane left out is tried again and comes back.
    c.drop_policy(&policy).await;
    http.wait_for("lane bad comes back", &bad, |r| {
        r.first_hop() == Some("order-bad")
    })
    .await;
    assert_eq!(routed("bad").await.0, "True", "lane bad is routed");
}

// Claims: a hostname and path match, a preview hostname, a Dubbo application stay with the
// object that claimed them first, in any namespace.

/// Traefik and its backends: one claims scenario at a time on two cores.
static CLAIMS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Service `name` selecting `app=<name>`, HTTP on port 80 to the pods' port `http`.
async fn http_service(c: &Cluster, name: &str) {
    c.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
    ))
    .await
    .expect("service");
}

/// A LaneEntry `name` at `traefik`'s listener with the spec's other `fields`.
async fn claiming_entry(c: &Cluster, traefik: &Traefik, name: &str, fields: serde_json::Value) {
    let mut spec = json!({"parentRefs": [traefik.parent_ref()]});
    for (k, v) in fields.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let entry = json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry", "metadata": {"name": name}, "spec": spec});
    c.apply_yaml(&entry.to_string()).await.expect("entry");
}

/// Waits until LaneEntry `name` is `Degraded` for `HostnameConflict` naming `holder`, with a
/// Warning Event saying so.
async fn reports_conflict(c: &Cluster, name: &str, holder: &str) {
    eventually(
        &format!("{name} reports HostnameConflict with {holder}"),
        || async {
            let entry = c.api::<laneway::api::LaneEntry>().get(name).await.ok();
            let conditions = entry
                .and_then(|e| e.status)
                .map(|s| s.conditions)
                .unwrap_or_default();
            conditions.iter().any(|c| {
                c.type_ == laneway::api::ConditionType::Degraded
                    && c.reason == "HostnameConflict"
                    && c.message.contains(holder)
            })
        },
    )
    .await;
    eventually(&format!("a HostnameConflict Event on {name}"), || async {
        c.events_for(name)
            .await
            .iter()
            .any(|e| e.starts_with("HostnameConflict") && e.contains(holder))
    })
    .await;
}

/// Creation times count in seconds: what is applied after this is younger.
async fn a_second_later() {
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
}

/// `n` requests for `req`, by the pod that answered each (`-` for no backend).
async fn answered_by(http: &Http, req: &Request, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for _ in 0..n {
        let pod = match http.get(req).await {
            Ok(r) => r.first_hop().unwrap_or("-").to_owned(),
            Err(_) => "-".to_owned(),
        };
        *by.entry(pod).or_default() += 1;
    }
    by
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_preview_hostname_never_takes_a_hostname_another_entry_serves() {
    let _serial = CLAIMS.lock().await;
    let c = cluster("claim-preview").await;
    let traefik = Traefik::start(&c.client, &c.ns).await;
    let backends = Backends::start();
    for svc in ["web", "api"] {
        http_service(&c, svc).await;
    }
    for (i, (pod, app, lane)) in [
        ("web-0", "web", None),
        ("web-api", "web", Some("api")),
        ("api-0", "api", None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = Backend::new(pod, app, &format!("198.18.0.{}", 10 + i));
        if let Some(lane) = lane {
            b = b.lane(lane);
        }
        backends.deploy(&c.client, &c.ns, &b).await;
    }
    c.apply_route("api", &["web"], &[], false).await;
    let _op = c.operator_with("lease", &["--route-grace=1s"]).await;
    // The entry with the preview template is the older one: a hostname another entry serves
    // is held by it whatever the ages.
    claiming_entry(
        &c,
        &traefik,
        "shop",
        json!({"hostnames": ["shop.example.com"], "previewHostnames": ["{lane}.example.com"],
        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/login"}}], "backend": {"service": "web", "port": 80}}]}),
    )
    .await;
    let http = traefik.http();
    // A preview route for api.example.com would match /login more specifically than api-site.
    let shop = Request::new("shop.example.com").path("/login");
    http.wait_for("the shop", &shop, |r| r.first_hop() == Some("web-0"))
        .await;
    a_second_later().await;
    claiming_entry(
        &c,
        &traefik,
        "api-site",
        json!({"hostnames": ["api.example.com"],
        "rules": [{"backend": {"service": "api", "port": 80}}]}),
    )
    .await;
    let login = Request::new("api.example.com").path("/login");
    http.wait_for("api.example.com", &login, |r| r.first_hop() == Some("api-0"))
        .await;
    reports_conflict(&c, "shop", &format!("LaneEntry {}/api-site", c.ns)).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        answered_by(&http, &login, 20).await,
        [("api-0".to_owned(), 20)].into()
    );
    // The rest of the entry keeps routing, lane header included.
    assert_eq!(
        answered_by(&http, &shop, 5).await,
        [("web-0".to_owned(), 5)].into()
    );
    assert_eq!(
        answered_by(&http, &shop.clone().lane("api"), 5).await,
        [("web-api".to_owned(), 5)].into()
    );
    let entry = c
        .api::<laneway::api::LaneEntry>()
        .get("shop")
        .await
        .expect("entry");
    let lanes = entry.status.expect("status").lanes;
    assert!(lanes.iter().all(|l| l.preview_hostnames.is_empty()), "{lanes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_in_another_namespace_cannot_take_a_path_from_the_namespace_serving_the_host() {
    let _serial = CLAIMS.lock().await;
    let c = cluster("claim-holder").await;
    let other = cluster("claim-taker").await;
    let options = TraefikOptions {
        namespaces: vec![other.ns.clone()],
        ..TraefikOptions::default()
    };
    let traefik = Traefik::start_with(&c.client, &c.ns, options).await;
    let backends = Backends::start();
    http_service(&c, "shop").await;
    http_service(&other, "thief").await;
    backends
        .deploy(&c.client, &c.ns, &Backend::new("shop-0", "shop", "198.18.0.10"))
        .await;
    backends
        .deploy(
            &other.client,
            &other.ns,
            &Backend::new("thief-0", "thief", "198.18.0.11"),
        )
        .await;
    let _op = c
        .operator_watching("lease", &[&c.ns, &other.ns], &["--route-grace=1s"])
        .await;
    claiming_entry(
        &c,
        &traefik,
        "shop",
        json!({"hostnames": ["shop.example.com"],
        "rules": [{"backend": {"service": "shop", "port": 80}}]}),
    )
    .await;
    let http = traefik.http();
    let checkout = Request::new("shop.example.com").path("/checkout");
    http.wait_for("the shop", &checkout, |r| r.first_hop() == Some("shop-0"))
        .await;
    a_second_later().await;
    claiming_entry(&other, &traefik, "checkout", json!({"hostnames": ["shop.example.com"],
        "rules": [{"matches": [{"path": {"type": "Exact", "value": "/checkout"}}], "backend": {"service": "thief", "port": 80}}]})).await;
    eventually("checkout has a status", || async {
        let entry = other.api::<laneway::api::LaneEntry>().get("checkout").await.ok();
        entry
            .and_then(|e| e.status)
            .is_some_and(|s| !s.conditions.is_empty())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        answered_by(&http, &checkout, 10).await,
        [("shop-0".to_owned(), 10)].into()
    );
    assert_eq!(
        answered_by(&http, &checkout.clone().lane("dev"), 10).await,
        [("shop-0".to_owned(), 10)].into()
    );
    reports_conflict(&other, "checkout", &format!("LaneEntry {}/shop", c.ns)).await;
    let routes = other
        .api::<laneway::gateway::HttpRoute>()
        .list(&Default::default())
        .await
        .expect("routes");
    assert!(
        routes.items.is_empty(),
        "the newer entry writes no route for the host"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dubbo_application_stays_with_the_tag_rule_that_published_it_first() {
    // The later TagRule's namespace sorts first.
    let c = cluster("zz-claim-dubbo").await;
    let late = cluster("aa-claim-dubbo").await;
    shop(&c).await;
    late.service("order").await;
    late.pod("order-late", "order", Some("gray"), "10.9.0.1").await;
    let _op = c.operator_watching("lease", &[&c.ns, &late.ns], &[]).await;
    let rule = tag_rule(
        "order",
        "  selector: {matchLabels: {app: order}}\n  dubbo: {application: shop-service, port: 20880}\n",
    );
    c.apply_yaml(&rule).await.expect("first rule");
    let published = || async { c.dubbo_rule("shop-service.tag-router").await.unwrap_or_default() };
    eventually("the first rule is published", || async {
        published().await.contains("10.1.0.3:20880")
    })
    .await;
    a_second_later().await;
    late.apply_yaml(&rule).await.expect("later rule");
    let holder = format!("TagRule {}/order", c.ns);
    eventually("the later rule reports DuplicateApplication", || async {
        let text = rule_problem(&late, "order").await;
        text.contains("DuplicateApplication") && text.contains(&holder)
    })
    .await;
    eventually("a DuplicateApplication Event on the later rule", || async {
        late.events_for("order")
            .await
            .iter()
            .any(|e| e.starts_with("DuplicateApplication") && e.contains(&holder))
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let content = published().await;
    assert!(
        content.contains("10.1.0.3:20880") && !content.contains("10.9.0.1"),
        "{content}"
    );
    assert!(!rule_problem(&c, "order").await.contains("DuplicateApplication"));
}

// Intent surely wrong, statuses that always arrive and never lie, and objects that cannot be
// read: each reported on the object at fault while everything else keeps working.

/// The Events about `name`, by reason.
async fn told(c: &Cluster, name: &str, reason: &str) -> bool {
    c.events_for(name)
        .await
        .iter()
        .any(|e| e.starts_with(&format!("{reason}: ")))
}

/// Status and reason of the `Degraded` condition of the LaneEntry or TagRule `name`, and its
/// message.
async fn degraded_of<K>(
    c: &Cluster,
    name: &str,
    conditions: fn(K) -> Vec<Condition>,
) -> (String, String, String)
where
    K: Namespaced,
{
    let Ok(object) = c.api::<K>().get(name).await else {
        return Default::default();
    };
    conditions(object)
        .into_iter()
        .find(|c| c.type_.as_str() == "Degraded")
        .map(|c| (format!("{:?}", c.status), c.reason, c.message))
        .unwrap_or_default()
}

fn entry_conditions(e: laneway::api::LaneEntry) -> Vec<Condition> {
    e.status.map(|s| s.conditions).unwrap_or_default()
}

fn rule_conditions(r: TagRule) -> Vec<Condition> {
    r.status.map(|s| s.conditions).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn weights_over_100_and_an_empty_baseline_are_reported_where_traffic_shows_them() {
    let c = cluster("hostile-intent").await;
    let traefik = gateway::Traefik::start(&c.client, &c.ns).await;
    let backends = gateway::Backends::start();
    for app in ["bff", "pay"] {
        c.apply_yaml(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {app}}}\nspec:\n  selector: {{app: {app}}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        ))
        .await
        .expect("service");
    }
    let pods = [
        ("bff-0", "bff", None),
        ("bff-a", "bff", Some("a")),
        ("bff-b", "bff", Some("b")),
        ("pay-0", "pay", None),
    ];
    for (i, (name, app, lane)) in pods.into_iter().enumerate() {
        let mut b = gateway::Backend::new(name, app, &format!("198.18.0.{}", 10 + i));
        if let Some(lane) = lane {
            b = b.lane(lane);
        }
        backends.deploy(&c.client, &c.ns, &b).await;
    }
    for lane in ["a", "b"] {
        c.apply_yaml(&lane_route(lane, "  services: [bff]\n  weight: 80\n"))
            .await
            .expect("lane");
    }
    for (host, service) in [("shop.example.com", "bff"), ("pay.example.com", "pay")] {
        let entry = json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
            "metadata": {"name": service},
            "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": [host],
                     "rules": [{"backend": {"service": service, "port": 80}}]}});
        c.apply_yaml(&entry.to_string()).await.expect("entry");
    }
    let _op = c.operator_with("lease", &["--route-grace=1s"]).await;

    // Two lanes of weight 80: the gateway takes the weights as relative, baseline gets nothing.
    let http = traefik.http();
    let untagged = gateway::Request::new("shop.example.com");
    http.wait_for("both lanes drawn", &untagged, |r| r.first_hop() == Some("bff-b"))
        .await;
    let t = http.load(&untagged, 1000, 8).await;
    let (a, b, base) = (t.first_hop("bff-a"), t.first_hop("bff-b"), t.first_hop("bff-0"));
    println!("weights 80 + 80: of 1000 requests in no lane, a {a}, b {b}, baseline {base}");
    assert_eq!((t.ok(), base), (1000, 0), "{:?}", t.statuses);
    assert!((440..=560).contains(&a), "about half in a: {a}");
    let (status, reason, message) = degraded_of(&c, "bff", entry_conditions).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "WeightsOver100"),
        "{message}"
    );
    assert!(message.contains("a 50%, b 50% and none to baseline"), "{message}");
    assert!(told(&c, "bff", "WeightsOver100").await);

    // Every pay pod tagged: requests in no lane find its baseline empty.
    let pay = gateway::Request::new("pay.example.com");
    http.wait_for("pay served", &pay, |r| r.first_hop() == Some("pay-0"))
        .await;
    c.apply_yaml(&tag_rule(
        "everything",
        "  selector: {matchLabels: {app: pay}}\n  tags: [{name: gray, podSelector: {}}]\n",
    ))
    .await
    .expect("tag rule");
    http.wait_for("503 in no lane", &pay, |r| r.status == 503).await;
    // The lanes' weights apply at pay too: the entry reports both.
    let empty = "Service \"pay\": every ready pod is in a lane (gray), so its baseline is empty";
    wait_for_baseline_empty(&c, "pay", empty).await;
    eventually("the TagRule reports BaselineEmpty", || async {
        degraded_of(&c, "everything", rule_conditions).await.1 == "BaselineEmpty"
    })
    .await;
    let (_, _, message) = degraded_of(&c, "everything", rule_conditions).await;
    assert!(message.contains(empty), "{message}");
    eventually("a BaselineEmpty Event on the TagRule", || {
        told(&c, "everything", "BaselineEmpty")
    })
    .await;
}

/// Waits until the LaneEntry `name` reads `Degraded` with the problem `BaselineEmpty` (after
/// its other problems, if any).
async fn wait_for_baseline_empty(c: &Cluster, name: &str, words: &str) {
    let deadline = Instant::now() + TIMEOUT;
    let mut last = degraded_of(c, name, entry_conditions).await;
    while !last.2.contains(words) && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        last = degraded_of(c, name, entry_conditions).await;
    }
    assert!(
        last.0 == "True" && last.2.contains(words),
        "entry {name}: {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_route_over_5200_services_gets_a_truncated_status_with_its_counts() {
    let c = cluster("hostile-big-status").await;
    let creates = (0..5200u32).map(|i| {
        let c = c.clone();
        async move {
            c.apply_yaml(&format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: big-{i:04}, labels: {{tier: big}}}}\nspec:\n  selector: {{app: big-{i:04}}}\n  ports: [{{port: 80}}]\n"
            ))
            .await
            .expect("service");
        }
    });
    futures::stream::iter(creates)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let _op = c.operator_with("lease", &[]).await;
    c.apply_yaml(&lane_route(
        "wide",
        "  serviceSelector: {matchLabels: {tier: big}}\n",
    ))
    .await
    .expect("route");
    eventually_within(
        "the status, truncated",
        std::time::Duration::from_secs(240),
        || async {
            let Ok(route) = c.api::<laneway::api::LaneRoute>().get("wide").await else {
                return false;
            };
            route.status.is_some_and(|s| s.service_count == 5200)
        },
    )
    .await;
    let route = c
        .api::<laneway::api::LaneRoute>()
        .get("wide")
        .await
        .expect("route");
    let status = route.status.expect("status");
    // No Service has a pod: each is counted, none falls back.
    assert_eq!((status.service_count, status.fallback_count), (5200, 0));
    let listed = status.services.len();
    println!("5200 services: status.services lists {listed}");
    assert!((1..5200).contains(&listed), "{listed}");
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_.as_str() == "Degraded")
        .expect("Degraded");
    assert_eq!(degraded.reason, "StatusTruncated", "{}", degraded.message);
    assert!(
        degraded
            .message
            .contains(&format!("status.services lists {listed} of 5200 services")),
        "{}",
        degraded.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_written_status_is_written_over() {
    let c = cluster("hostile-status").await;
    shop(&c).await;
    let _op = c.operator_with("lease", &[]).await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("Ready", ("True".to_owned(), "Resolved".to_owned()), || {
        condition(&c, "gray", "Ready")
    })
    .await;
    let hacked = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Hacked",
        "message": "by hand", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    c.api::<laneway::api::LaneRoute>()
        .patch_status("gray", &PatchParams::default(), &Patch::Merge(&hacked))
        .await
        .expect("status by hand");
    wait_for(
        "Ready written again",
        ("True".to_owned(), "Resolved".to_owned()),
        || condition(&c, "gray", "Ready"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_lane_route_is_reported_and_the_others_keep_resolving() {
    let c = cluster("hostile-unreadable").await;
    shop(&c).await;
    let _op = c.operator_with("lease", &[]).await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    // A status the schema takes (a string) and laneway cannot read: the object no longer
    // deserializes.
    let unreadable = json!({"status": {"services": [{"name": "order", "source": "Hacked"}]}});
    let resource = kube::api::ApiResource::erase::<laneway::api::LaneRoute>(&());
    kube::Api::<kube::api::DynamicObject>::namespaced_with(c.client.clone(), &c.ns, &resource)
        .patch_status("gray", &PatchParams::default(), &Patch::Merge(&unreadable))
        .await
        .expect("status by hand");
    eventually("an Unreadable Event on gray", || async {
        c.events_for("gray")
            .await
            .iter()
            .any(|e| e.starts_with("Unreadable: LaneRoute") && e.contains("unknown subset source \"Hacked\""))
    })
    .await;
    // Every other LaneRoute keeps resolving, and gray's status is written again.
    c.apply_route("dev-alice", &["order"], &[], false).await;
    wait_for("dev-alice", names(&["order-alice"]), || {
        c.own_lane_pods("order", "dev-alice")
    })
    .await;
    wait_for("gray's status written again", "Lane".to_owned(), || {
        source(&c, "gray", "order")
    })
    .await;
    assert_eq!(c.lane_pods("order", "gray").await, names(&["order-gray"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_status_write_is_told_by_a_warning_event() {
    let c = cluster("hostile-refused-status").await;
    shop(&c).await;
    c.apply_route("refused", &["order"], &[], false).await;
    // An admission policy refuses every status of LaneRoute `refused` in this namespace.
    let name = format!("deny-status-{}", c.ns);
    let rule = "{apiGroups: [laneway.io], apiVersions: [v1alpha1], operations: [UPDATE], resources: [laneroutes/status]}";
    let validation = "{expression: \"object.metadata.name != 'refused'\", message: \"status of refused is refused by policy\"}";
    c.refuse_by_policy(&name, rule, validation).await;
    eventually("the policy is enforced", || async {
        let probe = json!({"status": {"lane": "probe"}});
        c.api::<laneway::api::LaneRoute>()
            .patch_status("refused", &PatchParams::default(), &Patch::Merge(&probe))
            .await
            .is_err()
    })
    .await;
    let _op = c.operator_with("lease", &[]).await;
    eventually("a StatusRejected Event on the LaneRoute", || async {
        c.events_for("refused").await.iter().any(|e| {
            e.starts_with("StatusRejected: status could not be written:") && e.contains("refused by policy")
        })
    })
    .await;
    c.drop_policy(&name).await;
}

// ---------------------------------------------------------------------------------------------
// Hand edits of laneway's outputs, and slices that only look like laneway's.

/// Pods of the drift scenario, on addresses of their own in the tests' network namespace.
const DRIFT_BASELINE_IP: &str = "198.18.0.36";
const DRIFT_GRAY_IP: &str = "198.18.0.37";

/// Reads `name`, changes it with `edit` and writes it back whole, as `kubectl edit` does (again
/// when it changed meanwhile).
async fn edit_by_hand<K, F>(c: &Cluster, name: &str, edit: F)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    F: Fn(&mut K),
{
    let api = c.api::<K>();
    loop {
        let mut obj = api.get(name).await.expect("object to edit");
        edit(&mut obj);
        match api.replace(name, &PostParams::default(), &obj).await {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            written => {
                written.expect("hand edit");
                return;
            }
        }
    }
}

/// laneway's HTTPRoute of the LaneEntry `order`.
async fn entry_route(c: &Cluster) -> laneway::gateway::HttpRoute {
    let routes = c
        .api::<laneway::gateway::HttpRoute>()
        .list(&Default::default())
        .await
        .expect("routes");
    routes
        .items
        .into_iter()
        .find(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.name == "order")
        })
        .expect("the entry's route")
}

/// Names of the backends of every rule of a route, in order.
fn route_backends(route: &laneway::gateway::HttpRoute) -> Vec<String> {
    let rules = route.spec.rules.iter().flatten();
    rules
        .flat_map(|r| r.backend_refs.iter().flatten())
        .map(|b| b.name.clone())
        .collect()
}

/// Until a batch of requests without a lane header is all answered by the baseline pod.
async fn untagged_reach_baseline_only(http: &gateway::Http, what: &str) {
    let untagged = gateway::Request::new("order");
    eventually(what, || async {
        let t = http.load(&untagged, 40, 4).await;
        t.first_hop("order-1") == 40
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hand_edits_of_laneways_outputs_are_undone_counted_and_told() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use laneway::lanes::naming;

    let c = cluster("hand-edits").await;
    let traefik = gateway::Traefik::start(&c.client, &c.ns).await;
    let backends = gateway::Backends::start();
    c.apply_yaml("apiVersion: v1\nkind: Service\nmetadata: {name: order}\nspec:\n  selector: {app: order}\n  ports: [{name: http, port: 80, targetPort: http}]\n")
        .await
        .expect("service");
    backends
        .deploy(
            &c.client,
            &c.ns,
            &gateway::Backend::new("order-1", "order", DRIFT_BASELINE_IP),
        )
        .await;
    let gray = gateway::Backend::new("order-gray", "order", DRIFT_GRAY_IP).lane("gray");
    backends.deploy(&c.client, &c.ns, &gray).await;
    c.apply_yaml(&route("gray", &["order"], &[], false))
        .await
        .expect("lane");
    let entry = json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry", "metadata": {"name": "order"},
        "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": ["order"],
            "rules": [{"backend": {"service": "order", "port": 80}}]}});
    c.apply_yaml(&entry.to_string()).await.expect("entry");
    let op = c.operator_with("lease", &["--route-grace=1s"]).await;
    let http = traefik.http();
    untagged_reach_baseline_only(&http, "the baseline pod alone serves requests in no lane").await;
    let (baseline, lane) = (
        naming::baseline_service_name("order"),
        naming::lane_service_name("order", "gray"),
    );
    let within = std::time::Duration::from_secs(3);

    // A tagged pod added by hand to the baseline slice: requests in no lane reach it until the
    // slice is repaired.
    let lane_slice = c
        .api::<EndpointSlice>()
        .list(&kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={lane}")))
        .await
        .expect("lane slices")
        .items;
    let tagged = lane_slice[0].endpoints[0].clone();
    let baseline_slice = c
        .api::<EndpointSlice>()
        .list(&kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={baseline}")))
        .await
        .expect("baseline slices")
        .items[0]
        .metadata
        .name
        .clone()
        .expect("name");
    let edited = Instant::now();
    edit_by_hand::<EndpointSlice, _>(&c, &baseline_slice, |s| s.endpoints.push(tagged.clone())).await;
    wait_for_within("the baseline slice repaired", names(&["order-1"]), within, || {
        c.baseline_pods("order")
    })
    .await;
    eprintln!("baseline slice repaired in {:?}", edited.elapsed());
    untagged_reach_baseline_only(&http, "requests in no lane leave the tagged pod again").await;

    // A selector added to the baseline Service, a port changed on the lane Service.
    let edited = Instant::now();
    edit_by_hand::<Service, _>(&c, &baseline, |s| {
        s.spec.as_mut().expect("spec").selector = Some([("app".to_owned(), "order".to_owned())].into());
    })
    .await;
    edit_by_hand::<Service, _>(&c, &lane, |s| {
        s.spec.as_mut().expect("spec").ports.as_mut().expect("ports")[0].port = 8081;
    })
    .await;
    let service = |name: String| {
        let api = c.api::<Service>();
        async move { api.get(&name).await.expect("service").spec.expect("spec") }
    };
    eventually_within("the baseline Service without selector again", within, || async {
        service(baseline.clone()).await.selector.is_none()
    })
    .await;
    eventually_within("the lane Service's port back", within, || async {
        service(lane.clone()).await.ports.expect("ports")[0].port == 80
    })
    .await;
    eprintln!("both Services repaired in {:?}", edited.elapsed());

    // The route's baseline backend redirected to the lane: requests in no lane go to the
    // tagged pod until the route is repaired.
    let written = route_backends(&entry_route(&c).await);
    let route_name = entry_route(&c).await.metadata.name.expect("name");
    let edited = Instant::now();
    edit_by_hand::<laneway::gateway::HttpRoute, _>(&c, &route_name, |r| {
        for b in r
            .spec
            .rules
            .iter_mut()
            .flatten()
            .flat_map(|r| r.backend_refs.iter_mut().flatten())
        {
            if b.name == baseline {
                b.name = lane.clone();
            }
        }
    })
    .await;
    wait_for_within("the route's backends repaired", written, within, || async {
        route_backends(&entry_route(&c).await)
    })
    .await;
    eprintln!("route repaired in {:?}", edited.elapsed());
    untagged_reach_baseline_only(&http, "requests in no lane back on baseline").await;

    // Each repair is counted by kind and told on the owner, and the repaired outputs stay put.
    for (kind, at_least) in [("EndpointSlice", 1.0), ("Service", 2.0), ("HTTPRoute", 1.0)] {
        let filter = format!("kind=\"{kind}\"");
        eventually(&format!("{kind} repairs counted"), || async {
            op.metric("laneway_repairs_total", &filter).await >= at_least
        })
        .await;
    }
    for owner in ["gray", "order"] {
        eventually(&format!("a Repaired Event on {owner}"), || async {
            c.events_for(owner)
                .await
                .iter()
                .any(|e| e.starts_with("Repaired:"))
        })
        .await;
    }
    let outputs_written = || async {
        let mut n = 0.0;
        for kind in ["EndpointSlice", "Service", "HTTPRoute"] {
            n += op
                .metric("laneway_writes_total", &format!("kind=\"{kind}\""))
                .await;
        }
        n
    };
    let (repairs, writes) = (
        op.metric("laneway_repairs_total", "").await,
        outputs_written().await,
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        op.metric("laneway_repairs_total", "").await,
        repairs,
        "repaired again"
    );
    assert_eq!(
        outputs_written().await,
        writes,
        "outputs written again with nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_labelled_slice_under_a_service_laneway_does_not_manage_is_left_alone() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    let c = cluster("foreign-slice").await;
    shop(&c).await;
    c.apply_yaml("apiVersion: v1\nkind: Service\nmetadata: {name: legacy}\nspec: {ports: [{port: 80}]}\n")
        .await
        .expect("legacy service");
    let uid = c
        .api::<Service>()
        .get("legacy")
        .await
        .expect("legacy")
        .metadata
        .uid;
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "legacy-by-hand", "labels": {
            "kubernetes.io/service-name": "legacy",
            "endpointslice.kubernetes.io/managed-by": "controller.laneway.io"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "legacy", "uid": uid}]},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.9.9"]}],
        "ports": [{"name": "", "port": 80, "protocol": "TCP"}]});
    c.api::<EndpointSlice>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(slice).expect("slice"),
        )
        .await
        .expect("the user's slice");
    let _op = c.operator("lease").await;
    c.apply_yaml(&route("gray", &["order"], &[], false))
        .await
        .expect("lane");
    wait_for("the lane", names(&["order-gray"]), || {
        c.lane_pods("order", "gray")
    })
    .await;
    // A later plan of the namespace, after a pod changed.
    c.label_pod("order-2", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "the relabelled pod in the lane",
        names(&["order-2", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    assert!(
        c.api::<EndpointSlice>()
            .get_opt("legacy-by-hand")
            .await
            .expect("get")
            .is_some(),
        "laneway deleted a slice of a Service it does not manage"
    );
}
