//! Faults a single test can provoke against the real API server: rejected writes, a Service
//! that changes shape, look-alike objects, clocks that disagree, drift in a config centre,
//! deletions while no replica runs, bad timing flags.

mod cluster;

use std::time::{Duration, Instant};

use cluster::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::ResourceExt;
use laneway::api::{ConditionType, LaneRoute, TagRule};
use laneway::lanes::naming;
use serde_json::json;

fn tag_rule(name: &str, app: &str, application: &str) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: {app}}}}}\n  dubbo: {{application: {application}, port: 20880}}\n"
    )
}

async fn stalled(c: &Cluster, route: &str) -> (String, String, String) {
    route_status_conditions(c, route)
        .await
        .into_iter()
        .find(|c| c.type_ == ConditionType::Stalled)
        .map(|c| (format!("{:?}", c.status), c.reason, c.message))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_service_recreated_headless_is_followed_and_the_lane_keeps_moving() {
    let (c, mut op) = shop_and_operator("headless").await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    op.stop();

    // While the operator is away, the user recreates `order` as a headless Service and
    // relabels a pod. The lane Services must follow, but a Service's clusterIP cannot change
    // in place: the API server refuses laneway's update.
    c.delete::<Service>("order").await;
    eventually("order deleted", || async {
        c.api::<Service>().get_opt("order").await.ok().flatten().is_none()
    })
    .await;
    c.apply_yaml(
        "apiVersion: v1\nkind: Service\nmetadata: {name: order, labels: {tier: backend}}\nspec:\n  clusterIP: None\n  selector: {app: order}\n  ports: [{name: web, port: 80, targetPort: http}]\n",
    )
    .await
    .expect("headless service");
    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    let _op = c.operator("lease").await;
    wait_for(
        "the relabel reaches the lane",
        names(&["order-1", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    let lane = naming::lane_service_name("order", "gray");
    wait_for(
        "the lane Service is headless too",
        Some("None".to_owned()),
        || async {
            let svc = c.api::<Service>().get(&lane).await.ok()?;
            svc.spec?.cluster_ip
        },
    )
    .await;
    eventually("an Event names the object and the field", || async {
        c.events_for("gray")
            .await
            .iter()
            .any(|e| e.starts_with("Recreated") && e.contains(&lane) && e.contains("clusterIP"))
    })
    .await;
}

/// A ValidatingAdmissionPolicy (CEL, in the API server) refusing Services named `pay--*` in
/// the test's namespace; returns the name of the policy and of its binding.
async fn deny_pay_services(c: &Cluster) -> String {
    let name = format!("deny-pay-{}", c.ns);
    let rule = "{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [services]}";
    let validation = "{expression: \"!object.metadata.name.startsWith('pay--')\", messageExpression: \"'metadata.name: ' + object.metadata.name + ' is refused by policy'\"}";
    c.refuse_by_policy(&name, rule, validation).await;
    // The API server enforces a new policy once its informers have it.
    eventually("the policy is enforced", || async {
        let probe =
            "apiVersion: v1\nkind: Service\nmetadata: {name: pay--probe}\nspec:\n  ports: [{port: 80}]\n";
        let refused = c.apply_yaml(probe).await.is_err();
        if !refused {
            c.delete::<Service>("pay--probe").await;
        }
        refused
    })
    .await;
    name
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_write_is_reported_and_stalls_neither_its_namespace_nor_others() {
    let c = cluster("rejected").await;
    let other = cluster("rejected-other").await;
    shop(&c).await;
    let _op = c.operator_watching("lease", &[&c.ns, &other.ns], &[]).await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;

    // An admission policy refuses laneway's Services for `pay` in this namespace.
    let policy = deny_pay_services(&c).await;
    c.apply_route("dev-alice", &["order", "pay"], &[], false).await;
    // dev-alice has no pay of its own: pay's baseline Service, which serves it, is refused.
    let pay_baseline = naming::baseline_service_name("pay");
    eventually("status names the refused object", || async {
        let (status, reason, message) = stalled(&c, "dev-alice").await;
        status == "True" && reason == "WriteRejected" && message.contains(&pay_baseline)
    })
    .await;
    eventually("and so does an Event", || async {
        c.events_for("dev-alice")
            .await
            .iter()
            .any(|e| e.starts_with("WriteRejected") && e.contains(&pay_baseline))
    })
    .await;

    // Other writes in the namespace go on: a slice update and the deletion of a route.
    c.label_pod("order-2", "laneway.io/lane", Some("gray")).await;
    wait_for(
        "a relabel reaches its lane slice",
        names(&["order-2", "order-gray"]),
        || c.lane_pods("order", "gray"),
    )
    .await;
    c.delete::<LaneRoute>("gray").await;
    wait_for("the deleted route's slices go", None, || {
        c.lane_pods("user", "gray")
    })
    .await;

    // Another namespace is served at once.
    shop(&other).await;
    let started = Instant::now();
    other.apply_route("gray", &["order"], &[], false).await;
    wait_for("the other namespace's lane", names(&["order-gray"]), || {
        other.lane_pods("order", "gray")
    })
    .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the other namespace waited {took:?}"
    );

    // Once the policy goes, the refused Services are written and the route recovers.
    c.drop_policy(&policy).await;
    eventually("the refused Service is written", || async {
        c.services().await.contains(&pay_baseline)
    })
    .await;
    wait_for("not stalled", "False".to_owned(), || async {
        stalled(&c, "dev-alice").await.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_merely_labelled_as_laneways_is_never_touched() {
    let c = cluster("lookalike").await;
    shop(&c).await;
    c.apply_yaml(
        "apiVersion: v1\nkind: Service\nmetadata: {name: lookalike, labels: {app.kubernetes.io/managed-by: laneway}}\nspec:\n  selector: {app: order}\n  ports: [{port: 80}]\n",
    )
    .await
    .expect("service");
    let op = c.operator("lease").await;
    c.apply_route("gray", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || c.lane_pods("order", "gray")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        c.api::<Service>()
            .get_opt("lookalike")
            .await
            .expect("get")
            .is_some(),
        "a user Service with laneway's label was deleted"
    );
    assert_eq!(op.metric("laneway_writes_total", "op=\"delete\"").await, 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_rule_deleted_while_no_replica_ran_keeps_its_finalizer_until_its_rule_is_gone() {
    let c = cluster("orphan-rule").await;
    shop(&c).await;
    let key = "order-service.tag-router";
    let mut op = c.operator_with("lease", &["--rule-grace", "1s"]).await;
    c.apply_yaml(&tag_rule("order", "order", "order-service"))
        .await
        .expect("tag rule");
    eventually("published", || async { c.dubbo_rule(key).await.is_some() }).await;
    wait_for("finalizer", true, || async {
        c.api::<TagRule>()
            .get("order")
            .await
            .is_ok_and(|r| r.finalizers().iter().any(|f| f == "laneway.io/cleanup"))
    })
    .await;
    op.stop();

    c.delete::<TagRule>("order").await;
    let _op = c.operator_with("lease", &["--rule-grace", "1s"]).await;
    let end = Instant::now() + TIMEOUT;
    let mut done = false;
    while Instant::now() < end && !done {
        let rule = c.api::<TagRule>().get_opt("order").await.expect("get");
        let content = c.dubbo_rule(key).await;
        assert!(
            rule.is_some() || content.is_none(),
            "the TagRule went while its rule was still published: {content:?}"
        );
        done = rule.is_none() && content.is_none();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(done, "the rule and the TagRule were never both removed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_centre_edited_by_hand_is_repaired_while_other_rules_keep_changing() {
    let c = cluster("drift").await;
    shop(&c).await;
    let op = c.operator_with("lease", &["--centre-resync", "2s"]).await;
    c.apply_yaml(&tag_rule("order", "order", "order-service"))
        .await
        .expect("tag rule");
    c.apply_yaml(&tag_rule("pay", "pay", "pay-service"))
        .await
        .expect("tag rule");
    let key = "pay-service.tag-router";
    eventually("published", || async { c.dubbo_rule(key).await.is_some() }).await;
    let original = c.dubbo_rule(key).await;

    let tamper = json!({"data": {key: "configVersion: v3.0\nkey: pay-service\nenabled: false\n"}});
    c.api::<ConfigMap>()
        .patch(DUBBO_RULES, &PatchParams::default(), &Patch::Merge(&tamper))
        .await
        .expect("tamper");
    // Meanwhile the order rule changes every 300 ms.
    let churn = c.flip_lane("order-1", "gray", 40, Duration::from_millis(300));
    let tampered = Instant::now();
    wait_for("repaired", original, || c.dubbo_rule(key)).await;
    let took = tampered.elapsed();
    assert!(
        !churn.is_finished(),
        "repaired only after the changes stopped ({took:?})"
    );
    assert!(op.metric("laneway_centre_repairs_total", "configmap").await >= 1.0);
    churn.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_judges_the_lease_by_its_own_clock_not_the_holders() {
    let c = cluster("skew").await;
    shop(&c).await;
    // Another replica holds the Lease and renews it every 500 ms, but its clock is an hour
    // behind: every renewTime it writes looks long expired to a clock-comparing standby.
    let leases = c.api::<Lease>();
    let skewed = || {
        let behind = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(behind)
    };
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "skewed"},
        "spec": {"holderIdentity": "elsewhere", "leaseDurationSeconds": 4, "renewTime": skewed()},
    }))
    .expect("lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("lease");
    let holder = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                let patch = json!({"spec": {"renewTime": skewed()}});
                let _ = leases
                    .patch("skewed", &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let op = c.operator("skewed").await;
    c.apply_route("gray", &["order"], &[], false).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        op.metric("laneway_leader", "").await,
        0.0,
        "took a Lease that was being renewed"
    );
    assert_eq!(op.writes().await, 0.0);
    let held = leases.get("skewed").await.expect("lease");
    assert_eq!(
        held.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("elsewhere")
    );

    // Once the holder stops renewing, the standby takes over after the lease duration.
    holder.abort();
    wait_for("takes over", 1.0, || op.metric("laneway_leader", "")).await;
    wait_for("and writes", names(&["order-gray"]), || {
        c.lane_pods("order", "gray")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_timing_that_could_let_two_replicas_write_is_refused_at_start() {
    let c = cluster("timing").await;
    let cases: [(&[&str], &str); 3] = [
        (&["--lease-duration", "500ms"], "--lease-duration"),
        (
            &["--lease-duration", "4s", "--lease-renew-deadline", "5s"],
            "--lease-renew-deadline",
        ),
        (
            &[
                "--lease-duration",
                "4s",
                "--lease-renew-deadline",
                "3s",
                "--write-timeout",
                "2s",
            ],
            "--write-timeout",
        ),
    ];
    for (args, flag) in cases {
        let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_laneway"));
        run.args([
            "--namespaces",
            &c.ns,
            "--lease-namespace",
            &c.ns,
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(10), run.output())
            .await
            .unwrap_or_else(|_| panic!("{args:?}: laneway kept running"))
            .expect("run laneway");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_emptied_of_everything_is_forgotten() {
    let c = cluster("forget").await;
    let gone = cluster("forget-gone").await;
    let op = c.operator_watching("lease", &[&gone.ns], &[]).await;
    shop(&gone).await;
    gone.apply_route("gray", &["order"], &[], false).await;
    wait_for("gray", names(&["order-gray"]), || gone.lane_pods("order", "gray")).await;
    assert_eq!(op.metric("laneway_namespaces", "").await, 1.0);

    // Everything goes, as when a namespace is deleted.
    gone.delete::<LaneRoute>("gray").await;
    wait_for("route gone", false, || async {
        gone.api::<LaneRoute>()
            .get_opt("gray")
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    for pod in [
        "order-1",
        "order-2",
        "order-gray",
        "order-alice",
        "user-1",
        "user-featx",
        "pay-1",
    ] {
        gone.remove_pod(pod).await;
    }
    for svc in ["order", "user", "pay"] {
        gone.delete::<Service>(svc).await;
    }
    wait_for("forgotten", 0.0, || op.metric("laneway_namespaces", "")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_rule_whose_centre_is_gone_for_good_is_let_go_when_the_user_says_so() {
    let c = cluster("centre-gone").await;
    shop(&c).await;
    // A ZooKeeper that never answers (nothing listens there).
    let _op = c
        .operator_with("lease", &["--zookeeper", "127.0.0.1:9", "--rule-grace", "1s"])
        .await;
    c.apply_yaml(&tag_rule("order", "order", "order-service"))
        .await
        .expect("tag rule");
    eventually("published to the ConfigMap", || async {
        c.dubbo_rule("order-service.tag-router").await.is_some()
    })
    .await;
    c.delete::<TagRule>("order").await;
    eventually("disabled in the ConfigMap", || async {
        c.dubbo_rule("order-service.tag-router")
            .await
            .is_some_and(|r| r.contains("enabled: false"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        c.api::<TagRule>().get_opt("order").await.expect("get").is_some(),
        "the TagRule went before ZooKeeper confirmed the rule gone"
    );
    let annotate = json!({"metadata": {"annotations": {"laneway.io/skip-centre-cleanup": "true"}}});
    c.api::<TagRule>()
        .patch("order", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("annotate");
    wait_for("the TagRule goes", false, || async {
        c.api::<TagRule>().get_opt("order").await.ok().flatten().is_some()
    })
    .await;
}
