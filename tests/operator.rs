//! The operator against a real kube-apiserver + etcd: what a user would check with kubectl.

mod browser;
mod cluster;

use std::time::{Duration, Instant};

use cluster::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use laneway::api::{ConditionStatus, ConditionType, LaneRoute, LaneRouteStatus, TagRule};
use laneway::kind::Kind;
use laneway::lanes::naming;

#[tokio::test(flavor = "multi_thread")]
async fn lane_and_baseline_services_hold_exactly_the_right_pods() {
    let (c, _op) = shop_and_operator("lanes").await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    c.apply_route("dev-alice", &["order", "user", "pay"], &["feature-x"], false)
        .await;

    // (service, lane or None for baseline, pods that must serve it)
    let expected: [(&str, Option<&str>, &[&str]); 7] = [
        ("order", Some("gray"), &["order-gray"]),
        ("user", Some("gray"), &["user-1"]),
        ("order", Some("dev-alice"), &["order-alice"]),
        ("user", Some("dev-alice"), &["user-featx"]),
        ("pay", Some("dev-alice"), &["pay-1"]),
        ("order", None, &["order-1", "order-2"]),
        ("user", None, &["user-1"]),
    ];
    for (service, lane, pods) in expected {
        let what = format!("{service} in {}", lane.unwrap_or("baseline"));
        wait_for(&what, names(pods), || async {
            match lane {
                Some(lane) => c.lane_pods(service, lane).await,
                None => c.baseline_pods(service).await,
            }
        })
        .await;
    }

    wait_for("status source", "Fallback:feature-x".to_owned(), || {
        source(&c, "dev-alice", "user")
    })
    .await;
    let r = c.api::<LaneRoute>().get("dev-alice").await.expect("route");
    let status = r.status.clone().expect("status");
    assert_eq!((status.service_count, status.fallback_count), (3, 2));
    let order = status.services.iter().find(|s| s.name == "order").expect("order");
    assert_eq!(
        order.lane_service.as_deref(),
        Some(naming::lane_service_name("order", "dev-alice").as_str())
    );
    assert_eq!(order.endpoints, Some(1));
    assert!(r.finalizers().iter().any(|f| f == "laneway.io/cleanup"));

    // What `kubectl get lr` shows: the printer columns.
    let out = std::process::Command::new("kubectl")
        .args(["get", "lr", "-n", &c.ns])
        .output()
        .expect("kubectl");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows[0],
        ["NAME", "LANE", "SERVICES", "FALLBACK", "READY", "AGE"],
        "{text}"
    );
    assert_eq!(
        rows[1][..5],
        ["dev-alice", "dev-alice", "3", "2", "True"],
        "{text}"
    );
    assert_eq!(rows[2][..5], ["gray", "gray", "2", "1", "True"], "{text}");

    // `kubectl laneway explain` reads the same answer from the live cluster.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-laneway"))
        .args(["explain", "dev-alice", "-n", &c.ns])
        .output()
        .expect("kubectl-laneway");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("user     Fallback:feature-x  1      user-featx"),
        "{text}"
    );
    assert!(
        text.contains("pay      Baseline            1      pay-1"),
        "{text}"
    );

    let lane_svc = c
        .api::<Service>()
        .get(&naming::lane_service_name("order", "gray"))
        .await
        .expect("lane service");
    let spec = lane_svc.spec.clone().expect("spec");
    assert!(spec.selector.is_none(), "a lane Service is selectorless");
    assert_eq!(spec.ports.expect("ports")[0].port, 80);
    assert!(lane_svc
        .owner_references()
        .iter()
        .any(|o| o.kind == "LaneRoute" && o.name == "gray"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_falls_back_when_its_pods_go_and_returns_when_they_are_ready_again() {
    let (c, _op) = shop_and_operator("fallback").await;
    c.apply_route("gray", &["order"], &[], false).await;
    c.apply_route("dev-alice", &["order"], &[], true).await;
    wait_for("gray order", names(&["order-gray"]), || {
        c.lane_pods("order", "gray")
    })
    .await;

    c.set_pod_status("order-gray", "10.1.0.3", false).await;
    wait_for("gray falls back to baseline", "Baseline".to_owned(), || {
        source(&c, "gray", "order")
    })
    .await;
    assert_eq!(c.lane_pods("order", "gray").await, names(&["order-1", "order-2"]));
    wait_for(
        "FallbackActive",
        ("True".to_owned(), "FallingBack".to_owned()),
        || condition(&c, "gray", "FallbackActive"),
    )
    .await;
    let before = Timestamp::now();
    c.set_pod_status("order-gray", "10.1.0.3", true).await;
    wait_for("gray back in lane", names(&["order-gray"]), || {
        c.lane_pods("order", "gray")
    })
    .await;
    // The slice written for the change says when laneway saw it, for kube-proxy's network
    // programming latency.
    let times = c.trigger_times(&naming::lane_service_name("order", "gray")).await;
    assert_eq!(times.len(), 1, "{times:?}");
    let seen: Timestamp = times[0]
        .as_deref()
        .expect("last-change-trigger-time")
        .parse()
        .expect("RFC 3339");
    assert!(
        before <= seen && seen <= Timestamp::now(),
        "{seen} not after {before}"
    );
    wait_for("status says so", "Lane".to_owned(), || {
        source(&c, "gray", "order")
    })
    .await;

    // The lane's last pod goes: its Service stays, without endpoints, for the next one.
    c.remove_pod("order-gray").await;
    wait_for("gray on baseline again", "Baseline".to_owned(), || {
        source(&c, "gray", "order")
    })
    .await;
    wait_for("the lane's Service kept, empty", Some(vec![]), || {
        c.own_lane_pods("order", "gray")
    })
    .await;
    assert!(c
        .services()
        .await
        .contains(&naming::lane_service_name("order", "gray")));

    // Scaling the strict lane's only pod away empties it instead of falling back.
    c.remove_pod("order-alice").await;
    wait_for("strict lane empty", "Empty".to_owned(), || {
        source(&c, "dev-alice", "order")
    })
    .await;
    assert_eq!(c.lane_pods("order", "dev-alice").await, Some(vec![]));
    // It answers 503 by design: Ready, saying so.
    eventually("Ready names the service without instances", || async {
        let conditions = route_status_conditions(&c, "dev-alice").await;
        conditions.iter().any(|c| {
            c.type_ == ConditionType::Ready
                && c.status == ConditionStatus::True
                && c.message.ends_with("(answered 503): order")
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_of_endpoint_counts_alone_reaches_the_status_within_ten_seconds_not_per_pod() {
    let (c, _op) = shop_and_operator("counts").await;
    c.apply_route("gray", &["order"], &[], false).await;
    let endpoints = || async {
        let Ok(r) = c.api::<LaneRoute>().get("gray").await else {
            return -1;
        };
        r.status
            .and_then(|s| s.services.into_iter().find(|s| s.name == "order"))
            .and_then(|s| s.endpoints)
            .unwrap_or(-1)
    };
    wait_for("one gray endpoint", 1, endpoints).await;
    let written = Instant::now();

    c.pod("order-gray-2", "order", Some("gray"), "10.1.0.5").await;
    wait_for(
        "the slice has both",
        names(&["order-gray", "order-gray-2"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    if written.elapsed() < Duration::from_secs(8) {
        assert_eq!(endpoints().await, 1, "the count alone is not written at once");
    }
    wait_for_within("the count follows", 2, Duration::from_secs(15), endpoints).await;
    assert!(
        written.elapsed() >= Duration::from_secs(9),
        "written after {:?}",
        written.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_subsets_metric_counts_the_services_of_lane_routes_by_what_serves_them() {
    let (c, op) = shop_and_operator("subsets").await;
    let subsets = || async {
        let mut counts = Vec::new();
        for source in ["lane", "fallback", "baseline", "empty"] {
            let filter = format!("source=\"{source}\"");
            counts.push(op.metric("laneway_subsets", &filter).await as i64);
        }
        counts
    };
    c.apply_route("gray", &["order", "pay"], &[], false).await;
    c.apply_route("feature-x", &["user", "order"], &["gray"], false)
        .await;
    c.apply_route("dev-bob", &["pay"], &[], true).await;
    // gray: order its own, pay baseline; feature-x: user its own, order gray's; dev-bob (strict):
    // pay nothing.
    wait_for("lane, fallback, baseline, empty", vec![2, 1, 1, 1], subsets).await;

    c.remove_pod("order-gray").await;
    wait_for(
        "gray's order on baseline, and feature-x's",
        vec![1, 0, 3, 1],
        subsets,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn relabelling_a_pod_or_editing_a_tag_rule_moves_it_between_lanes() {
    let c = cluster("relabel").await;
    shop(&c).await;
    c.pod_with_labels("order-v2", "order", None, "10.1.0.9", &[("version", "v2")])
        .await;
    let _op = c.operator("lease").await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;

    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "relabelled pod joins gray",
        names(&["order-1", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    wait_for("and leaves baseline", names(&["order-2", "order-v2"]), || {
        c.baseline_pods("order")
    })
    .await;

    let rule = "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: order}\nspec:\n  selector: {matchLabels: {app: order}}\n  tags:\n    - {name: gray, podSelector: {matchLabels: {version: v2}}}\n";
    c.apply_yaml(rule).await.expect("tag rule");
    wait_for(
        "tag rule adds v2 to gray",
        names(&["order-1", "order-gray", "order-v2"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    wait_for("baseline", names(&["order-2"]), || c.baseline_pods("order")).await;

    c.apply_yaml(&rule.replace("version: v2", "version: v3"))
        .await
        .expect("edit");
    wait_for(
        "editing the rule moves v2 back",
        names(&["order-2", "order-v2"]),
        || c.baseline_pods("order"),
    )
    .await;
    let tr = c.api::<TagRule>().get("order").await.expect("rule");
    wait_for("TagRule status counts", 0, || async {
        c.api::<TagRule>()
            .get("order")
            .await
            .ok()
            .and_then(|r| r.status)
            .map_or(-1, |s| s.tagged_pods)
    })
    .await;
    assert!(tr.finalizers().iter().any(|f| f == "laneway.io/cleanup"));
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_lane_route_removes_its_outputs_and_nothing_else() {
    let (c, _op) = shop_and_operator("delete").await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    c.apply_route("dev-alice", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    wait_for("dev-alice", names(&["order-alice"]), || {
        c.lane_pods("order", "dev-alice")
    })
    .await;
    wait_for("finalizer", true, || async {
        c.api::<LaneRoute>()
            .get("gray")
            .await
            .is_ok_and(|r| r.finalizers().iter().any(|f| f == "laneway.io/cleanup"))
    })
    .await;

    c.delete::<LaneRoute>("gray").await;
    wait_for("gray's services gone", None, || c.lane_pods("order", "gray")).await;
    wait_for("route gone (finalizer removed)", false, || async {
        c.api::<LaneRoute>().get("gray").await.is_ok()
    })
    .await;
    let services = c.services().await;
    assert!(!services.contains(&naming::lane_service_name("user", "gray")));
    assert!(
        !services.contains(&naming::baseline_service_name("user")),
        "user is in no lane any more"
    );
    assert!(
        services.contains(&naming::baseline_service_name("order")),
        "order's baseline still serves dev-alice"
    );
    for user_service in ["order", "user", "pay"] {
        assert!(services.contains(&user_service.to_owned()));
    }
    assert_eq!(c.lane_pods("order", "dev-alice").await, names(&["order-alice"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_objects_are_rejected_by_the_api_server_naming_the_field() {
    let c = cluster("invalid").await;
    let cases = [
        (route("gray", &["order"], &["gray"], false), "spec.fallback must not list the lane itself"),
        (route("gray", &["order"], &["a|b"], false), "every fallback lane must be a valid label value"),
        (route("gray", &["order"], &["x", "x"], false), ".spec.fallback: duplicate entries"),
        (route("gray", &["order"], &[], false).replace("strict: false", "strict: false\n  weight: 101"), "spec.weight"),
        (route("gray", &["order"], &[], false).replace("strict: false", "strict: false\n  ttl: soon"), "spec.ttl"),
        (
            route("gray", &["order"], &[], false).replace("strict: false", "strict: false\n  serviceSelector: {}"),
            "exactly one of spec.services and spec.serviceSelector",
        ),
        (
            "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: r}\nspec:\n  selector: {}\n  tags:\n    - {name: gray, podSelector: {}}\n    - {name: gray, podSelector: {}}\n".into(),
            ".spec.tags: duplicate entries",
        ),
        (
            "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: r}\nspec:\n  selector: {}\n  dubbo: {application: order-service}\n".into(),
            "exactly one of dubbo.port and dubbo.portName",
        ),
    ];
    for (yaml, expected) in cases {
        let err = c.apply_yaml(&yaml).await.expect_err(expected);
        assert!(err.to_string().contains(expected), "{expected}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn problems_show_in_status_and_events() {
    let (c, _op) = shop_and_operator("problems").await;
    c.apply_route("gray", &["order", "ghost"], &[], false).await;
    wait_for(
        "Degraded",
        ("True".to_owned(), "UnknownService".to_owned()),
        || condition(&c, "gray", "Degraded"),
    )
    .await;
    assert_eq!(
        c.lane_pods("order", "gray").await,
        names(&["order-gray"]),
        "the rest of the lane still works"
    );
    eventually("an Event names the field", || async {
        c.events_for("gray")
            .await
            .iter()
            .any(|e| e.contains("UnknownService") && e.contains("spec.services"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_lane_is_removed_and_says_so() {
    let (c, _op) = shop_and_operator("ttl").await;
    c.apply_yaml(&route("gray", &["order"], &[], false).replace("strict: false", "strict: false\n  ttl: 4s"))
        .await
        .expect("route");
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    wait_for("expired", ("False".to_owned(), "Expired".to_owned()), || {
        condition(&c, "gray", "Ready")
    })
    .await;
    assert_eq!(c.lane_pods("order", "gray").await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resync_or_a_restart_writes_nothing_and_never_empties_a_slice() {
    let (c, mut op) = shop_and_operator("restart").await;
    c.apply_route("gray", &["order", "user", "pay"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    wait_for("status", "Baseline".to_owned(), || source(&c, "gray", "pay")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = op.writes().await;
    assert!(settled > 0.0);

    // Changes that do not touch routing: an annotation on a pod and on the route.
    let touch = serde_json::json!({"metadata": {"annotations": {"touched": "yes"}}});
    c.api::<k8s_openapi::api::core::v1::Pod>()
        .patch("order-1", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .expect("touch");
    c.api::<LaneRoute>()
        .patch("gray", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .expect("touch");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        op.writes().await,
        settled,
        "a change that alters no output writes nothing"
    );

    // Watch every lane slice through a restart: none may lose an endpoint.
    let before = c.lane_pods("order", "gray").await;
    let watcher = {
        let c2 = c.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let end = Instant::now() + Duration::from_secs(8);
            while Instant::now() < end {
                seen.push(c2.lane_pods("order", "gray").await);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            seen
        })
    };
    op.stop();
    let op = c.operator("lease").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        op.writes().await,
        0.0,
        "a restart with nothing changed writes nothing"
    );
    assert!(
        op.metric("laneway_reconciles_total", "ok").await >= 1.0,
        "the new replica did reconcile"
    );
    let rss = op.metric("laneway_resident_memory_bytes", "").await;
    assert!(
        (1e6..1e9).contains(&rss),
        "laneway_resident_memory_bytes is {rss}"
    );
    for observed in watcher.await.expect("watch") {
        assert_eq!(observed, before, "a lane slice changed during the restart");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_never_both_write_and_the_standby_takes_over() {
    let c = cluster("leader").await;
    shop(&c).await;
    let mut leader = c.operator("lease").await;
    wait_for("the first replica leads", 1.0, || {
        leader.metric("laneway_leader", "")
    })
    .await;
    let standby = c.operator("lease").await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(standby.metric("laneway_leader", "").await, 0.0);
    assert!(leader.writes().await > 0.0);
    assert_eq!(standby.writes().await, 0.0, "the standby wrote");

    // The leader crashes without releasing the Lease; the standby takes over within the lease duration.
    leader.kill();
    let crashed = Instant::now();
    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "standby applies the change",
        names(&["order-1", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    let takeover = crashed.elapsed();
    assert!(takeover < Duration::from_secs(10), "takeover took {takeover:?}");
    assert_eq!(standby.metric("laneway_leader", "").await, 1.0);
    eprintln!("takeover after a crash: {takeover:?} (lease 4s, retry 500ms)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_dropped_while_the_operator_was_down_is_retired_once_on_restart() {
    let c = cluster("owned").await;
    shop(&c).await;
    let rule = "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: order}\nspec:\n  selector: {matchLabels: {app: order}}\n  dubbo: {application: order-service, port: 20880}\n";
    let key = "order-service.tag-router";
    let published = || c.dubbo_rule(key);
    let mut op = c.operator_with("lease", &["--rule-grace", "1s"]).await;
    c.apply_yaml(rule).await.expect("tag rule");
    eventually("rule published", || async {
        published().await.is_some_and(|r| r.contains("enabled: true"))
    })
    .await;
    op.stop();

    // While no operator runs, the TagRule stops publishing a Dubbo rule.
    c.apply_yaml(&rule.replace("  dubbo: {application: order-service, port: 20880}\n", ""))
        .await
        .expect("edit");
    let op = c.operator_with("lease", &["--rule-grace", "1s"]).await;
    wait_for("retired on restart", None, published).await;
    // Later changes to the rule set must not bring the retired rule back.
    c.apply_yaml(
        &rule
            .replace("name: order}", "name: user}")
            .replace("app: order", "app: user")
            .replace("order-service", "user-service"),
    )
    .await
    .expect("another rule");
    let mut came_back = false;
    let mut user_published = false;
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end && !(user_published && came_back) {
        let data = c.dubbo_rules().await;
        user_published |= data.contains_key("user-service.tag-router");
        came_back |= data.contains_key(key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(user_published, "the other rule was not published");
    assert!(!came_back, "a retired rule came back");
    assert!(op.metric("laneway_publishes_total", "result=\"deleted\"").await >= 1.0);
}

/// `order` as the user writes it: guarded (`laneway.io/selector`), with `spec.selector`, or both.
async fn order_service(c: &Cluster, annotation: Option<&str>, selector: bool) {
    let annotations = annotation.map_or(String::new(), |a| {
        format!(", annotations: {{laneway.io/selector: \"{a}\"}}")
    });
    let selector = if selector {
        "  selector: {app: order}\n"
    } else {
        ""
    };
    c.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: order, labels: {{tier: backend}}{annotations}}}\nspec:\n{selector}  ports: [{{name: web, port: 80, targetPort: http}}]\n"
    ))
    .await
    .expect("order");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guarded_service_holds_untagged_pods_only_keeps_them_through_a_bad_annotation_and_hands_back() {
    let (c, _op) = shop_and_operator("guard").await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("baseline Service", names(&["order-1", "order-2"]), || {
        c.baseline_pods("order")
    })
    .await;

    order_service(&c, Some("app=order"), false).await;
    wait_for("order's own slices", names(&["order-1", "order-2"]), || {
        c.slice_pods("order")
    })
    .await;
    wait_for(
        "status names order as baseline",
        Some("order".to_owned()),
        || async {
            let r = c.api::<LaneRoute>().get("gray").await.ok()?;
            let status = r.status?;
            status
                .services
                .into_iter()
                .find(|s| s.name == "order")?
                .baseline_service
        },
    )
    .await;
    wait_for("no separate baseline Service", None, || c.baseline_pods("order")).await;
    assert!(!c
        .services()
        .await
        .contains(&naming::baseline_service_name("order")));
    assert_eq!(c.lane_pods("order", "gray").await, names(&["order-gray"]));

    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "a relabelled pod leaves the guarded Service",
        names(&["order-2"]),
        || c.slice_pods("order"),
    )
    .await;
    wait_for("and joins the lane", names(&["order-1", "order-gray"]), || {
        c.lane_pods("order", "gray")
    })
    .await;

    order_service(&c, Some("app in (order)"), false).await;
    eventually("an Event on the Service names the annotation", || async {
        c.events_for("order")
            .await
            .iter()
            .any(|e| e.starts_with("InvalidGuard") && e.contains("laneway.io/selector"))
    })
    .await;
    wait_for(
        "the LaneRoute says so",
        ("True".to_owned(), "InvalidGuard".to_owned()),
        || condition(&c, "gray", "Degraded"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        c.slice_pods("order").await,
        names(&["order-2"]),
        "it keeps the pods it had"
    );
    c.label_pod("order-1", "laneway.io/lane", None).await;
    wait_for("and the selector it had", names(&["order-1", "order-2"]), || {
        c.slice_pods("order")
    })
    .await;
    assert_eq!(
        c.lane_pods("order", "gray").await,
        names(&["order-gray"]),
        "the lane works on"
    );

    order_service(&c, Some("app=order"), true).await;
    eventually("a selector beside the annotation is reported", || async {
        c.events_for("order")
            .await
            .iter()
            .any(|e| e.starts_with("GuardWithSelector") && e.contains("also has spec.selector"))
    })
    .await;
    wait_for("laneway's slices of order go", None, || c.slice_pods("order")).await;

    order_service(&c, None, true).await;
    wait_for(
        "handed back: no problem",
        ("False".to_owned(), "NoProblems".to_owned()),
        || condition(&c, "gray", "Degraded"),
    )
    .await;
    wait_for("a baseline Service again", names(&["order-1", "order-2"]), || {
        c.baseline_pods("order")
    })
    .await;
}

/// A writer holding a Lease in `c`'s namespace, with its metrics, and one step run by it; the
/// Lease is kept while the `Leading` lives.
mod writing {
    use super::*;
    use laneway::leader::{Elector, Fence, LeaseSettings};
    use laneway::metrics::{Metrics, WriteLabels};
    use laneway::writer::{Done, Known, Limits, Op, Output, Plan, Step, WriteError, Writer};
    use std::sync::{Arc, Mutex};

    pub struct Leading {
        pub writer: Writer,
        pub metrics: Arc<Metrics>,
        _stop: tokio::sync::watch::Sender<bool>,
    }

    pub async fn leading(c: &Cluster) -> Leading {
        let metrics = Arc::new(Metrics::default());
        let timeout = Duration::from_secs(2);
        let fence = Fence::new(timeout, metrics.clone());
        let lease = LeaseSettings {
            namespace: c.ns.clone(),
            name: "writer".into(),
            identity: "writer-test".into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
            write_timeout: timeout,
        };
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(Elector::new(c.client.clone(), lease, fence.clone()).run(stop_rx));
        let mut leading = fence.subscribe();
        tokio::time::timeout(Duration::from_secs(30), leading.wait_for(|l| *l))
            .await
            .expect("the lease within 30 s")
            .expect("leading");
        let limits = Limits {
            concurrency: 4,
            qps: 0.0,
            burst: 1,
        };
        let writer = Writer::new(c.client.clone(), fence, metrics.clone(), limits, "writer-test");
        Leading {
            writer,
            metrics,
            _stop: stop,
        }
    }

    impl Leading {
        pub async fn run(&self, namespace: &str, op: Op) -> Result<Done, WriteError> {
            let mut plan = Plan::new(namespace);
            plan.phase(vec![Step::from(op)]);
            let reports = Mutex::new(Vec::new());
            self.writer
                .execute(plan, |r| reports.lock().unwrap().push(r))
                .await;
            let mut reports = reports.into_inner().unwrap();
            reports.remove(0).results.remove(0).1
        }

        /// Writes `output` stamped with `hash` as `known` says; returns its version as written.
        pub async fn output(&self, output: Output, hash: String, known: Known) -> String {
            let ns = output.target().key.namespace;
            let op = Op::Apply { output, hash, known };
            match self.run(&ns, op).await.expect("written") {
                Done::Applied { version, .. } => version.expect("a version"),
                other => panic!("not applied: {other:?}"),
            }
        }

        /// How many writes of `kind` went out as `op`.
        pub fn writes(&self, kind: Kind, op: &'static str) -> u64 {
            self.metrics.writes.get_or_create(&WriteLabels { kind, op }).get()
        }
    }
}

/// The writer against the API server: a slice is created when laneway saw none and replaced
/// at the version it saw, and, when it is not as laneway saw it (created meanwhile, changed
/// since, or deleted), replaced at the version it has then or created again: never server-side
/// applied, so neither what others set on it nor a field laneway dropped stays.
#[tokio::test(flavor = "multi_thread")]
async fn slices_are_written_whole_whatever_changed_since_laneway_last_saw_them() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use laneway::writer::{Known, Output, HASH_ANNOTATION};
    use std::sync::Arc;

    const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";
    let c = cluster("writer_known").await;
    let leading = writing::leading(&c).await;
    let slices = c.api::<EndpointSlice>();
    let slice = |ip: &str, trigger: bool| -> Arc<EndpointSlice> {
        let annotations = match trigger {
            true => serde_json::json!({ TRIGGER: "2026-01-01T00:00:00Z" }),
            false => serde_json::json!({}),
        };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "order-x", "namespace": c.ns, "annotations": annotations},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [ip]}],
            }))
            .expect("slice"),
        )
    };
    let write = |ip: &'static str, trigger: bool, known: Known| {
        leading.output(Output::Slice(slice(ip, trigger)), ip.to_owned(), known)
    };
    let how = |op: &'static str| leading.writes(Kind::EndpointSlice, op);
    let live = || async {
        let s = slices.get("order-x").await.expect("slice");
        let ip = s.endpoints[0].addresses[0].clone();
        assert_eq!(s.annotations().get(HASH_ANNOTATION), Some(&ip));
        (ip, s.resource_version().expect("version"))
    };
    let edit_by_hand = || async {
        slices
            .patch(
                "order-x",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"by": "hand"}}})),
            )
            .await
            .expect("edit by hand")
    };

    let version = write("10.0.0.1", false, Known::Absent).await;
    assert_eq!(how("create"), 1);
    assert_eq!(live().await, ("10.0.0.1".to_owned(), version.clone()));

    // Replaced at the version it was written at.
    let version = write("10.0.0.2", true, Known::At(version)).await;
    assert_eq!(how("replace"), 1);
    assert_eq!(live().await, ("10.0.0.2".to_owned(), version.clone()));

    // Changed by someone else since: the replace is refused, and the replace at the version read
    // lands whole: the edit goes, and so does the annotation laneway no longer sets.
    edit_by_hand().await;
    write("10.0.0.3", false, Known::At(version)).await;
    assert_eq!(how("replace"), 2);
    assert_eq!(live().await.0, "10.0.0.3");
    let written = slices.get("order-x").await.expect("slice");
    assert_eq!(written.labels().get("by"), None);
    assert_eq!(written.annotations().get(TRIGGER), None);

    // Seen absent, but there: replaced at the version read.
    edit_by_hand().await;
    write("10.0.0.4", false, Known::Absent).await;
    assert_eq!((how("create"), how("replace")), (1, 3));
    assert_eq!(live().await.0, "10.0.0.4");
    let written = slices.get("order-x").await.expect("slice");
    assert_eq!(written.labels().get("by"), None);

    // Deleted since it was seen: created again.
    let (_, version) = live().await;
    c.delete::<EndpointSlice>("order-x").await;
    write("10.0.0.5", false, Known::At(version)).await;
    assert_eq!((how("create"), how("replace")), (2, 3));
    assert_eq!(live().await.0, "10.0.0.5");
    assert_eq!(how("apply"), 0);
}

/// The writer against the API server: a lane or baseline Service is created, and replaced
/// whole at the version laneway saw, or at the version a read gives when it changed since: a
/// label laneway dropped goes, and the cluster IP the API server gave it stays.
#[tokio::test(flavor = "multi_thread")]
async fn services_are_created_and_replaced_whole_keeping_their_cluster_ip() {
    use laneway::writer::{Known, Output};
    use std::sync::Arc;

    let c = cluster("writer_services").await;
    let leading = writing::leading(&c).await;
    let services = c.api::<Service>();
    let write = |port: u16, labels: serde_json::Value, known: Known| {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "order-x", "namespace": c.ns, "labels": labels},
            "spec": {"ports": [{"name": "http", "port": port}]},
        }))
        .expect("service");
        leading.output(Output::Service(Arc::new(service)), port.to_string(), known)
    };
    let how = |op: &'static str| leading.writes(Kind::Service, op);
    let live = || async {
        let s = services.get("order-x").await.expect("service");
        let spec = s.spec.clone().expect("spec");
        let port = spec.ports.expect("ports")[0].port;
        (port, s.labels().clone(), spec.cluster_ip.expect("a cluster IP"))
    };

    let version = write(80, serde_json::json!({"a": "1", "b": "2"}), Known::Absent).await;
    let (_, _, ip) = live().await;
    assert_ne!(ip, "None");

    write(81, serde_json::json!({"a": "1"}), Known::At(version.clone())).await;
    let (port, labels, now) = live().await;
    assert_eq!((port, now.as_str()), (81, ip.as_str()));
    assert_eq!(labels.get("b"), None);

    // Changed since (at the stale version): replaced at the version read.
    write(82, serde_json::json!({}), Known::At(version)).await;
    let (port, labels, now) = live().await;
    assert_eq!((port, now.as_str()), (82, ip.as_str()));
    assert!(labels.is_empty(), "{labels:?}");
    assert_eq!((how("create"), how("replace"), how("apply")), (1, 2, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn statuses_are_replaced_at_the_version_seen_or_at_the_version_after_a_change_since() {
    use laneway::lanes::ObjectKey;
    use laneway::writer::{Done, Op, Status};

    let c = cluster("writer_status").await;
    let leading = writing::leading(&c).await;
    c.apply_route("gray", &["order"], &[], false).await;
    let routes = c.api::<LaneRoute>();
    let get = || async { routes.get("gray").await.expect("LaneRoute") };
    let write = |(service_count, expires_at): (i32, Option<&str>), version: Option<String>| {
        let status = LaneRouteStatus {
            lane: Some("gray".into()),
            service_count,
            expires_at: expires_at.map(str::to_owned),
            ..Default::default()
        };
        let op = Op::Status {
            key: ObjectKey::new(&c.ns, "gray"),
            status: Status::LaneRoute(status),
            version,
        };
        let (leading, ns) = (&leading, &c.ns);
        async move { leading.run(ns, op).await.expect("written") }
    };
    let how = |op| leading.writes(Kind::LaneRoute, op);
    let shown = |r: &LaneRoute| {
        let s = r.status.clone().expect("a status");
        (s.service_count, s.expires_at)
    };

    // Replaced at the version seen.
    let seen = get().await.resource_version();
    write((1, Some("2030-01-01T00:00:00Z")), seen).await;
    let r = get().await;
    assert_eq!(shown(&r), (1, Some("2030-01-01T00:00:00Z".to_owned())));

    // Changed since it was seen: replaced at the version it has now, whole.
    let stale = r.resource_version();
    routes
        .patch(
            "gray",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"strict": true}})),
        )
        .await
        .expect("edit by hand");
    write((2, None), stale).await;
    let r = get().await;
    assert_eq!(shown(&r), (2, None));
    assert!(r.spec.strict, "the edit stays");

    // No version known: at the version it has now.
    write((3, Some("2031-01-01T00:00:00Z")), None).await;
    assert_eq!(shown(&get().await), (3, Some("2031-01-01T00:00:00Z".to_owned())));
    assert_eq!(how("status"), 3);

    // Deleted since: nothing to write, and no error.
    let seen = get().await.resource_version();
    c.delete::<LaneRoute>("gray").await;
    let done = write((5, None), seen).await;
    assert!(matches!(done, Done::Written), "{done:?}");
    assert!(routes.get_opt("gray").await.expect("get").is_none());
}

/// What the page's cells say: `lane/service` -> `source` (`Lane`, `Fallback`, `Baseline`,
/// `Empty`, `none`), as the browser shows them.
const PAGE_CELLS: &str = "const out = {}; \
    for (const td of document.querySelectorAll('td[data-source]')) \
      out[td.dataset.lane + '/' + td.dataset.service] = td.dataset.source; \
    return out;";

/// The same, from the LaneRoutes' statuses.
async fn status_cells(c: &Cluster, services: &[&str]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for route in c
        .api::<LaneRoute>()
        .list(&Default::default())
        .await
        .expect("list")
    {
        let status = route.status.unwrap_or_default();
        let lane = status.lane.clone().unwrap_or_default();
        for service in services {
            let source = status
                .services
                .iter()
                .find(|s| s.name == *service)
                .map(|s| s.source.to_string())
                .map_or("none".to_owned(), |s| {
                    s.split(':').next().unwrap_or_default().to_owned()
                });
            out.insert(format!("{lane}/{service}"), source.into());
        }
    }
    out.into()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lanes_page_shows_what_the_lane_routes_report_and_follows_a_relabel() {
    let (c, _op) = shop_and_operator("dashboard").await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    c.apply_route("dev-alice", &["order", "user", "pay"], &["feature-x"], false)
        .await;
    c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {name: edge}\n\
         spec:\n  parentRefs: [{name: shop}]\n  hostnames: [shop.test]\n\
         \x20 previewHostnames: ['{lane}.preview.shop.test']\n\
         \x20 rules: [{backend: {service: order, port: 80}}]\n",
    )
    .await
    .expect("LaneEntry");
    wait_for(
        "dev-alice's user from feature-x",
        "Fallback:feature-x".to_owned(),
        || source(&c, "dev-alice", "user"),
    )
    .await;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    std::fs::create_dir_all(&dir).expect("target/tmp");
    let out = dir.join(format!("dashboard-{}.out", std::process::id()));
    let state = dir.join(format!("dashboard-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let probes = state.join("laneway/probes");
    let _page = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-laneway"))
        .args(["dashboard", "-n", &c.ns, "--listen", "127.0.0.1:0"])
        .env("XDG_STATE_HOME", &state)
        .stdout(std::fs::File::create(&out).expect("output file"))
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl laneway dashboard");
    let mut first = String::new();
    eventually("the dashboard prints its address", || {
        first = std::fs::read_to_string(&out).unwrap_or_default();
        std::future::ready(first.ends_with('\n'))
    })
    .await;
    let url = first
        .trim()
        .rsplit(' ')
        .next()
        .expect("the page's address")
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");

    let browser = browser::Browser::start().await;
    browser.open(&url).await;
    let services = ["order", "pay", "user"];
    let want = status_cells(&c, &services).await;
    assert_eq!(want["dev-alice/user"], "Fallback", "{want}");
    assert_eq!(want["gray/pay"], "none", "{want}");
    browser
        .wait_for("the matrix of the LaneRoutes' statuses", PAGE_CELLS, |v| {
            *v == want
        })
        .await;
    let ready = browser
        .eval("return document.querySelector('td[data-lane=\"gray\"][data-service=\"order\"]').textContent")
        .await;
    assert!(
        ready.as_str().unwrap_or_default().starts_with("1 ready"),
        "{ready}"
    );
    let links = browser
        .eval("return [...document.querySelectorAll('a[data-link=\"gray\"]')].map(a => a.href)")
        .await;
    assert_eq!(
        links,
        serde_json::json!(["http://gray.preview.shop.test/", "http://shop.test/?lane=gray"]),
        "the lane's preview host and link"
    );
    last_probes_show_as_they_are_saved(&c, &browser, &probes).await;
    let shot = browser.screenshot().await;
    assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(dir.join("dashboard.png"), shot).expect("write the screenshot");

    // gray's only order pod leaves the lane: the page shows baseline serving gray at order.
    let moved = Instant::now();
    c.label_pod("order-gray", laneway::api::DEFAULT_LANE_LABEL, None)
        .await;
    let gray_order =
        "return document.querySelector('td[data-lane=\"gray\"][data-service=\"order\"]').dataset.source";
    browser
        .wait_for("gray's order from baseline on the page", gray_order, |v| {
            v == "Baseline"
        })
        .await;
    println!("relabel -> the page shows it: {:?}", moved.elapsed());
    assert_eq!(browser.eval(PAGE_CELLS).await, status_cells(&c, &services).await);
}

/// The "last probe" column: a lane never probed says so; a probe `kubectl laneway probe` saves
/// (in the layout it writes) shows on the page within its refresh, its sentence in the lane's row.
async fn last_probes_show_as_they_are_saved(
    c: &Cluster,
    browser: &browser::Browser,
    probes: &std::path::Path,
) {
    let probe_cell = |lane: &str| {
        format!("return document.querySelector('td[data-probe=\"{lane}\"]').firstChild.textContent")
    };
    browser
        .wait_for("gray never probed", &probe_cell("gray"), |v| v == "never probed")
        .await;
    let expected = [laneway::probe::Expected {
        service: "order".into(),
        source: Some(laneway::api::SubsetSource::Lane),
    }];
    let verdict = laneway::probe::judge("dev-alice", &expected, Vec::new());
    let last = laneway::probe::LastProbe {
        at: "2026-12-06T10:00:00Z".into(),
        entry: "LaneEntry edge".into(),
        summary: laneway::probe::render(&verdict)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned(),
        verdict,
    };
    laneway::probe::save(probes, &c.ns, "dev-alice", &last).expect("save the probe");
    browser
        .wait_for("dev-alice's last probe", &probe_cell("dev-alice"), |v| {
            v == "lane dev-alice never reached order: no hop reported"
        })
        .await;
    let class = browser
        .eval("return document.querySelector('td[data-probe=\"dev-alice\"]').className")
        .await;
    assert_eq!(class, "probe lost");
}
