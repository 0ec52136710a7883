//! The operator publishes Dubbo tag-router rules to a real Nacos server (tests/nacos), logging in
//! with a username and password, and retires them when the TagRule goes.

mod cluster;

use std::process::Command;

use cluster::*;
use laneway::api::TagRule;
use laneway::lanes::DubboRule;

/// The Nacos admin password: distinctive, so that a leak into logs or status is easy to find.
const PASSWORD: &str = "Lw-pass-7c41e9";

/// A Nacos server with auth on, stopped when dropped.
struct Nacos {
    dir: std::path::PathBuf,
    port: u16,
}

impl Nacos {
    fn start() -> Nacos {
        assert!(
            std::env::var_os("NACOS_JAR").is_some(),
            "NACOS_JAR is not set: run the tests with `make test` (tests/in-cluster.sh builds Nacos)"
        );
        let dir =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nacos-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let free = |p: u16| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok();
        let port = (20000..30000u16)
            .step_by(7)
            .find(|p| free(*p) && free(p + 1000) && free(p + 1001) && free(p - 1000))
            .expect("free Nacos ports");
        let nacos = Nacos { dir, port };
        nacos.start_again();
        nacos
    }

    /// Starts the server (again) on the same port and data.
    fn start_again(&self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nacos/start.sh");
        let out = Command::new(script)
            .args([&self.port.to_string(), &*self.dir.to_string_lossy(), "--auth"])
            .env("NACOS_ADMIN_PASSWORD", PASSWORD)
            .output()
            .expect("start Nacos");
        assert!(
            out.status.success(),
            "Nacos did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn stop(&self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nacos/stop.sh");
        let _ = Command::new(script).arg(&self.dir).output();
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The config stored under `data_id` in group `dubbo`, read as a Dubbo client would.
    async fn config(&self, data_id: &str) -> Option<String> {
        let http = reqwest::Client::new();
        let login = http
            .post(format!("{}/nacos/v1/auth/login", self.url()))
            .form(&[("username", "nacos"), ("password", PASSWORD)])
            .send()
            .await
            .ok()?;
        let token: serde_json::Value = login.json().await.ok()?;
        let token = token["accessToken"].as_str()?.to_owned();
        let response = http
            .get(format!("{}/nacos/v1/cs/configs", self.url()))
            .query(&[("dataId", data_id), ("group", "dubbo"), ("accessToken", &token)])
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    }
}

impl Drop for Nacos {
    fn drop(&mut self) {
        self.stop();
    }
}

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
