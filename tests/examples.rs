//! The shipped examples are valid and resolve to the lanes the README describes.

mod fixtures;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodIP, PodStatus, Service};
use kube::ResourceExt;
use laneway::api::{EntryMode, LaneEntry, LaneRoute, SubsetSource, TagRule};
use laneway::lanes::{Config, Desired, Index, ObjectKey, PodInfo, ServiceInfo};

/// Every document of every file in `dir` (under the repository), as `kubectl apply -f dir` reads
/// them: subdirectories are left out.
fn documents(dir: &str) -> Vec<serde_json::Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        // Empty documents (a trailing `---`) are left out, as kubectl does.
        let values: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
        docs.extend(values);
    }
    docs
}

fn of_kind<T: serde::de::DeserializeOwned>(docs: &[serde_json::Value], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some(kind))
        .map(|d| serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{kind}: {e}")))
        .collect()
}

/// The ready pods each Deployment would run, as a kubelet would report them.
fn pods_of(deployments: &[Deployment]) -> Vec<PodInfo> {
    let mut pods = Vec::new();
    for d in deployments {
        let spec = d.spec.as_ref().expect("spec");
        for i in 0..spec.replicas.unwrap_or(1) {
            let ip = format!("10.244.0.{}", pods.len() + 10);
            let mut pod = Pod {
                metadata: spec.template.metadata.clone().unwrap_or_default(),
                spec: spec.template.spec.clone(),
                status: Some(PodStatus {
                    pod_ip: Some(ip.clone()),
                    pod_ips: Some(vec![PodIP { ip }]),
                    phase: Some("Running".into()),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            };
            pod.metadata.name = Some(format!("{}-{i}", d.name_any()));
            pod.metadata.namespace = d.namespace();
            pods.push(PodInfo::from_pod(&pod).expect("named pod"));
        }
    }
    pods
}

/// The examples in `dir`, checked against their CEL rules, with `counts` LaneRoutes, TagRules,
/// Services and LaneEntries, indexed and resolved for namespace `ns` (which has no problem).
fn resolved(
    dir: &str,
    ns: &str,
    counts: (usize, usize, usize, usize),
    now: k8s_openapi::jiff::Timestamp,
) -> (Index, Desired) {
    let docs = documents(dir);
    let routes: Vec<LaneRoute> = of_kind(&docs, "LaneRoute");
    let rules: Vec<TagRule> = of_kind(&docs, "TagRule");
    let services: Vec<Service> = of_kind(&docs, "Service");
    let deployments: Vec<Deployment> = of_kind(&docs, "Deployment");
    let entries: Vec<LaneEntry> = of_kind(&docs, "LaneEntry");
    assert_eq!((routes.len(), rules.len(), services.len(), entries.len()), counts);
    for e in &entries {
        kube::core::cel::validate_cel(e).unwrap_or_else(|e| panic!("{e}"));
    }
    for r in &routes {
        kube::core::cel::validate_cel(r).unwrap_or_else(|e| panic!("{}: {e}", r.name_any()));
    }
    for r in &rules {
        kube::core::cel::validate_cel(r).unwrap_or_else(|e| panic!("{}: {e}", r.name_any()));
    }
    let mut idx = Index::from_objects(
        Config::default(),
        pods_of(&deployments),
        services.iter().filter_map(ServiceInfo::from_service),
        routes,
        rules,
    );
    for e in entries {
        idx.apply(e);
    }
    let d = idx.desired(ns, now);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    (idx, d)
}

#[test]
fn examples_parse_pass_their_cel_rules_and_resolve_as_documented() {
    let created = k8s_openapi::jiff::Timestamp::now();
    let (idx, d) = resolved("examples", "shop", (4, 1, 4, 2), created);
    let sources: BTreeMap<(String, String), String> = d
        .routes
        .iter()
        .flat_map(|(route, r)| {
            r.services
                .iter()
                .map(move |s| ((route.clone(), s.name.clone()), s.source.to_string()))
        })
        .collect();
    let source = |route: &str, svc: &str| sources[&(route.to_owned(), svc.to_owned())].clone();
    assert_eq!(source("gray", "order"), "Lane");
    assert_eq!(source("gray", "pay"), "Lane");
    assert_eq!(source("gray", "user"), "Baseline");
    assert_eq!(source("dev-alice", "order"), "Lane");
    assert_eq!(
        source("dev-alice", "user"),
        SubsetSource::Fallback("feature-x".into()).to_string()
    );
    assert_eq!(source("dev-alice", "gateway-bff"), "Baseline");
    assert_eq!(source("dev-bob", "user"), "Lane");
    assert_eq!(source("dev-bob", "pay"), "Empty");
    assert_eq!(source("feature-x", "user"), "Lane");
    assert_eq!(
        d.routes["gray"]
            .services
            .iter()
            .find(|s| s.name == "order")
            .map(|s| s.endpoints),
        Some(Some(2))
    );

    let edge = &d.entries["shop-edge"];
    let weights: Vec<(&str, i32)> = edge.lanes.iter().map(|l| (l.lane.as_str(), l.weight)).collect();
    assert_eq!(
        weights,
        [("dev-alice", 0), ("dev-bob", 0), ("feature-x", 0), ("gray", 5)]
    );
    assert_eq!(edge.baseline_weight, Some(95));
    assert_eq!(
        edge.routes.len(),
        10 + 4,
        "4 rules × (4 lanes × (header, link, cookie and their twins: 5) + clearing 2 + no lane 1) = 92 rules at 10 per route, and a preview route per lane"
    );
    let previews: Vec<&str> = edge
        .lanes
        .iter()
        .flat_map(|l| l.preview_hostnames.iter().map(String::as_str))
        .collect();
    assert_eq!(
        previews,
        [
            "dev-alice.preview.shop.example.com",
            "dev-bob.preview.shop.example.com",
            "feature-x.preview.shop.example.com",
            "gray.preview.shop.example.com"
        ]
    );
    let mesh = &d.entries["shop-mesh"];
    assert_eq!(mesh.mode, EntryMode::Mesh);
    assert_eq!(
        mesh.routes.len(),
        4,
        "one route per Service with an HTTP port: {:?}",
        mesh.routes
    );

    let rules = idx.tag_rules(created);
    let rule = rules.reports[&ObjectKey::new("shop", "order")]
        .dubbo
        .clone()
        .expect("order-service rule");
    assert_eq!(rule.key, "order-service.tag-router");
    assert!(
        rule.content.contains("  - name: gray\n    addresses: ["),
        "{}",
        rule.content
    );
    assert!(rule.content.contains("  - name: dev-alice\n"), "{}", rule.content);
}

/// `make demo-dubbo`'s chain: dev-alice has order only and falls back to feature-x (user only);
/// gray has every service and a fifth of the requests in no lane.
#[test]
fn the_dubbo_chain_example_resolves_as_the_demo_shows() {
    let (_, d) = resolved(
        "examples/dubbo-chain",
        "chain",
        (3, 2, 3, 1),
        k8s_openapi::jiff::Timestamp::now(),
    );
    let source = |route: &str, svc: &str| {
        d.routes[route]
            .services
            .iter()
            .find(|s| s.name == svc)
            .map(|s| s.source.to_string())
            .unwrap_or_default()
    };
    assert_eq!(source("dev-alice", "gateway-bff"), "Baseline");
    assert_eq!(source("dev-alice", "order"), "Lane");
    assert_eq!(source("dev-alice", "user"), "Fallback:feature-x");
    for svc in ["gateway-bff", "order", "user"] {
        assert_eq!(source("gray", svc), "Lane");
    }
    let weights: Vec<(&str, i32)> = d.entries["chain-edge"]
        .lanes
        .iter()
        .map(|l| (l.lane.as_str(), l.weight))
        .collect();
    assert!(weights.contains(&("gray", 20)), "{weights:?}");
}
