//! Flux and Argo CD read LaneRoutes, TagRules and LaneEntries as they are: in progress until
//! laneway has looked at them, healthy when resolved, failed when only the user can fix them.
//! Flux's verdict comes from the real kstatus library (`tests/gitops/cmd/kstatus`), Argo CD's
//! from the shipped health check run by Debian's Lua 5.1 and by gopher-lua (Argo CD's VM), both
//! on the objects as the live API server serves them.

mod cluster;
mod gateway;

use std::path::PathBuf;
use std::process::Command;

use cluster::*;
use kube::api::{Patch, PatchParams};
use laneway::api::{LaneRoute, TagRule};
use serde_json::json;

fn tools() -> PathBuf {
    PathBuf::from(std::env::var("LANEWAY_GITOPS_BIN").expect(
        "LANEWAY_GITOPS_BIN is not set: run the tests with `make test` (tests/in-cluster.sh builds tests/gitops)",
    ))
}

fn gitops(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/gitops")
        .join(file)
}

/// Runs `command` (`what` in messages) and returns its stdout; it must succeed.
fn run(what: &str, command: &mut Command) -> Vec<u8> {
    let out = command.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The verdicts of Flux (kstatus) and Argo CD (Debian Lua, gopher-lua) on a live object.
#[derive(Debug, PartialEq)]
struct Verdict {
    kstatus: String,
    argo: String,
}

async fn verdict(c: &Cluster, kind: &str, name: &str) -> (Verdict, String) {
    let object = run(
        "kubectl",
        Command::new("kubectl").args([
            "get",
            "-n",
            &c.ns,
            &format!("{kind}.laneway.io/{name}"),
            "-o",
            "json",
        ]),
    );
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{kind}-{name}.json", c.ns));
    std::fs::write(&file, &object).expect("write object");
    let kstatus_of = format!("kstatus {kind}/{name} of {}", String::from_utf8_lossy(&object));
    let out = run(
        &kstatus_of,
        Command::new(tools().join("kstatus")).args(["-n", &c.ns, &format!("{kind}/{name}")]),
    );
    let line: serde_json::Value = serde_json::from_slice(&out).expect("kstatus JSON");
    let kstatus = line["status"].as_str().unwrap_or_default().to_owned();

    let lua = run(
        "argocd-health.sh",
        Command::new(gitops("argocd-health.sh")).arg(&file),
    );
    let lua = String::from_utf8_lossy(&lua).trim_end().to_owned();
    let gopher = run(
        "argocd-lua",
        Command::new(tools().join("argocd-lua"))
            .arg("-script")
            .arg(gitops("argocd-health.lua"))
            .arg(&file),
    );
    let gopher = String::from_utf8_lossy(&gopher).trim_end().to_owned();
    assert_eq!(
        lua, gopher,
        "Debian's Lua and Argo CD's gopher-lua disagree on {kind}/{name}"
    );
    let (argo, message) = lua.split_once('\t').unwrap_or((&lua, ""));
    (
        Verdict {
            kstatus,
            argo: argo.to_owned(),
        },
        format!(
            "kstatus: {} | argo: {message}",
            line["message"].as_str().unwrap_or_default()
        ),
    )
}

async fn expect(c: &Cluster, kind: &str, name: &str, kstatus: &str, argo: &str) {
    let want = Verdict {
        kstatus: kstatus.into(),
        argo: argo.into(),
    };
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let (got, messages) = verdict(c, kind, name).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}/{name}: expected {want:?}, still {got:?} ({messages})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Applies `yaml` (one object), then waits for both verdicts on it.
async fn apply_and_expect(c: &Cluster, yaml: &str, kstatus: &str, argo: &str) {
    c.apply_yaml(yaml).await.expect("apply");
    let object: serde_json::Value = serde_saphyr::from_str(yaml).expect("YAML");
    let kind = object["kind"].as_str().expect("kind").to_lowercase();
    let name = object["metadata"]["name"].as_str().expect("name");
    expect(c, &kind, name, kstatus, argo).await;
}

fn tag_rule(name: &str, application: &str) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: order}}}}\n  dubbo: {{application: {application}, port: 20880}}\n"
    )
}

fn mesh_entry(name: &str, service: &str) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {{name: {name}}}\nspec:\n  mesh: {{services: [{service}]}}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn all_three_kinds_read_in_progress_until_laneway_resolves_them_then_healthy() {
    let c = cluster("gitops-healthy").await;
    gateway::install_crds(&c.client).await;
    shop(&c).await;
    c.apply_route("gray", &["order"], &[], false).await;
    c.apply_yaml(&tag_rule("order", "order-service"))
        .await
        .expect("tag rule");
    c.apply_yaml(&mesh_entry("mesh", "order")).await.expect("entry");

    // Nothing has looked at them yet: neither tool may call them done.
    expect(&c, "laneroute", "gray", "InProgress", "Progressing").await;
    expect(&c, "tagrule", "order", "InProgress", "Progressing").await;
    expect(&c, "laneentry", "mesh", "InProgress", "Progressing").await;

    let mut op = c.operator("lease").await;
    expect(&c, "laneroute", "gray", "Current", "Healthy").await;
    expect(&c, "tagrule", "order", "Current", "Healthy").await;
    expect(&c, "laneentry", "mesh", "Current", "Healthy").await;

    // A new generation is in progress until laneway has observed it.
    op.stop();
    c.api::<LaneRoute>()
        .patch(
            "gray",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"services": ["order", "user"]}})),
        )
        .await
        .expect("patch");
    expect(&c, "laneroute", "gray", "InProgress", "Progressing").await;
    let _op = c.operator("lease").await;
    expect(&c, "laneroute", "gray", "Current", "Healthy").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn what_only_the_user_can_fix_reads_failed_and_degraded() {
    let c = cluster("gitops-failed").await;
    gateway::install_crds(&c.client).await;
    shop(&c).await;
    let _op = c.operator("lease").await;

    // Two LaneRoutes declare the same lane; the younger one is ignored.
    apply_and_expect(&c, &route("gray", &["order"], &[], false), "Current", "Healthy").await;
    let twin = "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: gray-2}\nspec: {lane: gray, services: [user]}\n";
    apply_and_expect(&c, twin, "Failed", "Degraded").await;

    // A lane whose ttl has passed stays gone until the user extends it.
    let short = route("short", &["order"], &[], false).replace("strict: false", "strict: false\n  ttl: 3s");
    apply_and_expect(&c, &short, "Failed", "Degraded").await;

    // Two TagRules publish the same Dubbo application.
    apply_and_expect(&c, &tag_rule("order", "order-service"), "Current", "Healthy").await;
    apply_and_expect(&c, &tag_rule("order-2", "order-service"), "Failed", "Degraded").await;

    // An edge entry for a port the Service does not have.
    let edge = "apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {name: edge}\nspec:\n  parentRefs: [{name: public}]\n  rules: [{backend: {service: order, port: 8443}}]\n";
    apply_and_expect(&c, edge, "Failed", "Degraded").await;

    // Fixed by the user, each becomes healthy again.
    c.delete::<LaneRoute>("gray").await;
    expect(&c, "laneroute", "gray-2", "Current", "Healthy").await;
    c.delete::<TagRule>("order").await;
    expect(&c, "tagrule", "order-2", "Current", "Healthy").await;
    apply_and_expect(&c, &mesh_entry("edge", "order"), "Current", "Healthy").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_subset_reads_alike_in_both_tools_by_design_or_as_an_outage() {
    let c = cluster("gitops-empty").await;
    gateway::install_crds(&c.client).await;
    shop(&c).await;
    c.service("idle").await;
    let _op = c.operator("lease").await;

    // A strict lane without instances of its own answers 503 by design: done.
    apply_and_expect(
        &c,
        &route("solo", &["order", "pay"], &[], true),
        "Current",
        "Healthy",
    )
    .await;
    let (_, message) = verdict(&c, "laneroute", "solo").await;
    assert!(message.contains("(answered 503): order, pay"), "{message}");

    // No ready pod in any tier, baseline included: an outage, waited out like a Deployment's.
    apply_and_expect(
        &c,
        &route("dev-bob", &["order", "idle"], &[], false),
        "InProgress",
        "Progressing",
    )
    .await;
    let (_, message) = verdict(&c, "laneroute", "dev-bob").await;
    assert!(
        message.contains("EmptySubset") && message.contains("idle"),
        "{message}"
    );
    c.pod("idle-1", "idle", None, "10.1.3.1").await;
    expect(&c, "laneroute", "dev-bob", "Current", "Healthy").await;
}
