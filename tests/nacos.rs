//! The operator publishes Dubbo tag-router rules to a real Nacos server (tests/nacos), logging in
//! with a username and password, and retires them when the TagRule goes.

mod cluster;
mod peers;

use cluster::*;
use laneway::api::TagRule;
use laneway::lanes::DubboRule;
use peers::{Nacos, NACOS_PASSWORD as PASSWORD};

#[tokio::test(flavor = "multi_thread")]
async fn rules_reach_nacos_follow_pod_changes_and_are_retired_with_their_tag_rule() {
    let nacos = Nacos::start();
    let c = cluster("nacos").await;
    c.service("order").await;
    c.pod("order-1", "order", None, "10.7.0.1").await;
    c.pod("order-2", "order", Some("gray"), "10.7.0.2").await;
    let url = nacos.url();
    let args = [
        "--nacos-addr",
        &url,
        "--nacos-username",
        "nacos",
        "--nacos-password",
        PASSWORD,
        "--rule-grace",
        "3s",
    ];
    let op = c.operator_with("lease", &args).await;
    c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: order}\nspec:\n  selector: {matchLabels: {app: order}}\n  dubbo: {application: order-service, port: 20880}\n",
    )
    .await
    .expect("tag rule");

    let data_id = "order-service.tag-router";
    let first = DubboRule::new(
        "order-service",
        false,
        &[("gray".into(), vec!["10.7.0.2:20880".into()])],
    );
    wait_for("rule in Nacos", Some(first.content.clone()), || {
        nacos.config(data_id)
    })
    .await;

    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    let addresses = vec!["10.7.0.1:20880".to_owned(), "10.7.0.2:20880".to_owned()];
    let second = DubboRule::new("order-service", false, &[("gray".into(), addresses)]);
    wait_for("Nacos follows the relabel", Some(second.content.clone()), || {
        nacos.config(data_id)
    })
    .await;
    wait_for("status shows the Nacos publication", true, || async {
        c.api::<TagRule>()
            .get("order")
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| {
                s.publications.iter().any(|p| {
                    p.centre == "nacos"
                        && p.last_error.is_none()
                        && p.content_hash.as_deref() == Some(&second.content_hash)
                })
            })
    })
    .await;
    assert_eq!(
        op.metric("laneway_publishes_total", "centre=\"nacos\",result=\"error\"")
            .await,
        0.0
    );
    assert!(
        !format!(
            "{:?}",
            laneway::publish::NacosSettings {
                password: Some(PASSWORD.to_owned().into()),
                ..Default::default()
            }
        )
        .contains(PASSWORD),
        "the password shows in Debug output"
    );

    // A pod that leaves the lane and comes back within a second: Nacos answers reads from a cache
    // it refreshes after a write, so a read then still shows the rule from before the first
    // change. The rule Nacos ends with is the last one, not the one in between.
    let ok = "centre=\"nacos\",result=\"ok\"";
    let published = op.metric("laneway_publishes_total", ok).await;
    c.label_pod("order-1", "laneway.io/lane", None).await;
    eventually("the change in between is published", || async {
        op.metric("laneway_publishes_total", ok).await > published
    })
    .await;
    c.label_pod("order-1", "laneway.io/lane", Some("gray")).await;
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    assert_eq!(
        nacos.config(data_id).await,
        Some(second.content.clone()),
        "Nacos kept the rule from in between"
    );

    // While Nacos is down, the failure shows in status, and no credential appears anywhere:
    // not the password, not the access token (a JWT: "eyJ..."), not a URL carrying one.
    nacos.stop();
    c.label_pod("order-1", "laneway.io/lane", None).await;
    let error = || async {
        let rule = c.api::<TagRule>().get("order").await.ok()?;
        let status = rule.status?;
        let nacos = status.publications.into_iter().find(|p| p.centre == "nacos")?;
        nacos.last_error
    };
    eventually("status shows the Nacos error", || async {
        error().await.is_some()
    })
    .await;
    let shown = error().await.unwrap_or_default();
    let log = std::fs::read_to_string(&op.log).expect("operator log");
    let events = c.events_for("order").await.join("\n");
    for (place, text) in [("status", &shown), ("log", &log), ("events", &events)] {
        for secret in [PASSWORD, "eyJ", "accessToken="] {
            assert!(
                !text.contains(secret),
                "{secret:?} appears in the {place}: {shown}"
            );
        }
    }
    nacos.start_again();
    let third = DubboRule::new(
        "order-service",
        false,
        &[("gray".into(), vec!["10.7.0.2:20880".to_owned()])],
    );
    wait_for("Nacos is caught up once back", Some(third.content), || {
        nacos.config(data_id)
    })
    .await;

    // Deleting the TagRule first switches routing off (dubbo-go consumers miss deletions) ...
    c.delete::<TagRule>("order").await;
    let disabled = DubboRule::disabled("order-service").content;
    wait_for("rule disabled in Nacos", Some(disabled), || nacos.config(data_id)).await;
    // ... then, after the grace period, deletes it.
    wait_for("rule removed from Nacos", None, || nacos.config(data_id)).await;
    wait_for("TagRule gone", false, || async {
        c.api::<TagRule>().get("order").await.is_ok()
    })
    .await;
}
