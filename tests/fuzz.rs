//! The core under arbitrary sequences of events, fed as the controller feeds it: no panic, and
//! what the controller keeps up to date incrementally always equals a full recomputation.
//! `make test` runs a few hundred sequences; `make fuzz` runs 100,000
//! (`LANEWAY_FUZZ_CASES`).

mod fixtures;

use std::collections::BTreeMap;

use fixtures::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use laneway::api::{LaneRoute, TagRule};
use laneway::lanes::{Config, Desired, Index, PodInfo, ServiceInfo};
use proptest::prelude::*;

const LANES: [&str; 4] = ["gray", "dev-alice", "feature-x", "blue"];
const APPS: [&str; 3] = ["order", "user", "pay"];
const NAMESPACES: [&str; 2] = ["shop", "other"];

/// One watched change, as the controller receives it.
#[derive(Clone, Debug)]
enum Event {
    Pod(PodInfo),
    DeletePod(&'static str, String),
    Service(ServiceInfo),
    DeleteService(&'static str, String),
    Route(laneway::api::LaneRoute),
    DeleteRoute(&'static str, String),
    Rule(laneway::api::TagRule),
    DeleteRule(&'static str, String),
}

fn arb_pod() -> impl Strategy<Value = Event> {
    (
        0..NAMESPACES.len(),
        0..12usize,
        0..APPS.len(),
        prop::option::of(0..LANES.len()),
        (
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
        ),
        (
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(ns, i, app, lane, (ready, leaving, done), (no_ip, no_port, v2))| {
                let mut p = pod(
                    &format!("p{i}"),
                    APPS[app],
                    lane.map(|l| LANES[l]),
                    &format!("10.0.{ns}.{}", i + 1),
                );
                p.namespace = NAMESPACES[ns].into();
                p.ready = ready;
                p.terminating = leaving;
                p.terminal = done;
                if no_ip {
                    p.ips.clear();
                }
                if no_port {
                    p.ports.clear();
                }
                if v2 {
                    p.labels.insert("version".into(), "v2".into());
                }
                Event::Pod(p)
            },
        )
}

fn arb_service() -> impl Strategy<Value = Event> {
    (0..NAMESPACES.len(), 0..APPS.len(), 0..5u8).prop_map(|(ns, app, shape)| {
        let mut s = service(APPS[app]);
        s.namespace = NAMESPACES[ns].into();
        match shape {
            0 => s.selector = None,
            1 => s.headless = true,
            2 => s.ports.clear(),
            3 => s.ports[0].target_port = Some(IntOrString::Int(9090)),
            _ => {}
        }
        Event::Service(s)
    })
}

fn arb_route() -> impl Strategy<Value = Event> {
    (
        0..NAMESPACES.len(),
        0..LANES.len(),
        prop::collection::vec(0..APPS.len() + 1, 0..4),
        prop::collection::vec(0..LANES.len(), 0..3),
        (
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
        ),
    )
        .prop_map(|(ns, lane, services, fallback, (strict, by_selector, alias))| {
            let names: Vec<String> = services
                .into_iter()
                .map(|s| APPS.get(s).map_or_else(|| "ghost".to_owned(), |a| a.to_string()))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let fallback: Vec<&str> = fallback.into_iter().map(|f| LANES[f]).collect();
            // A second route for the same lane under another name, now and then.
            let name = if alias {
                format!("{}-again", LANES[lane])
            } else {
                LANES[lane].to_owned()
            };
            let mut r = route(&name, &names, &fallback, strict);
            r.spec.lane = Some(LANES[lane].to_owned());
            if by_selector {
                r.spec.services = None;
                r.spec.service_selector = Some(selector(&[("tier", "backend")]));
            }
            r.metadata.namespace = Some(NAMESPACES[ns].into());
            Event::Route(r)
        })
}

fn arb_rule() -> impl Strategy<Value = Event> {
    (
        0..NAMESPACES.len(),
        0..APPS.len(),
        0..LANES.len(),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(ns, app, lane, dubbo, broken)| {
            let application = format!("{}-service", APPS[app]);
            let mut r = tag_rule(
                APPS[app],
                APPS[app],
                &[(LANES[lane], &[("version", "v2")])],
                dubbo.then_some(application.as_str()),
            );
            if broken {
                r.spec.selector = invalid_selector();
            }
            r.metadata.namespace = Some(NAMESPACES[ns].into());
            Event::Rule(r)
        })
}

fn arb_event() -> impl Strategy<Value = Event> {
    let ns = || 0..NAMESPACES.len();
    prop_oneof![
        6 => arb_pod(),
        2 => (ns(), 0..12usize).prop_map(|(n, i)| Event::DeletePod(NAMESPACES[n], format!("p{i}"))),
        2 => arb_service(),
        1 => (ns(), 0..APPS.len()).prop_map(|(n, a)| Event::DeleteService(NAMESPACES[n], APPS[a].into())),
        2 => arb_route(),
        1 => (ns(), 0..LANES.len()).prop_map(|(n, l)| Event::DeleteRoute(NAMESPACES[n], LANES[l].into())),
        1 => arb_rule(),
        1 => (ns(), 0..APPS.len()).prop_map(|(n, a)| Event::DeleteRule(NAMESPACES[n], APPS[a].into())),
    ]
}

/// The entry of [`NAMESPACES`] an object is in ("shop" for any other).
fn namespace(of: &str) -> &'static str {
    NAMESPACES.iter().find(|n| **n == of).copied().unwrap_or("shop")
}

fn cases() -> u32 {
    std::env::var("LANEWAY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_sequence_of_events_keeps_the_incremental_view_equal_to_a_full_recomputation(
        events in prop::collection::vec(arb_event(), 1..60),
    ) {
        let mut index = Index::new(Config::default());
        let mut cached: BTreeMap<&str, Desired> = BTreeMap::new();
        for event in events {
            // A pod change recomputes only the services it touched; anything else the whole
            // namespace, as the controller does.
            let (ns, affected) = match event {
                Event::Pod(p) => (namespace(&p.namespace), Some(index.apply(p).services)),
                Event::DeletePod(ns, name) => (ns, Some(index.delete::<PodInfo>(ns, &name).services)),
                Event::Service(s) => {
                    let ns = namespace(&s.namespace);
                    index.apply(s);
                    (ns, None)
                }
                Event::DeleteService(ns, name) => {
                    index.delete::<ServiceInfo>(ns, &name);
                    (ns, None)
                }
                Event::Route(r) => {
                    let ns = namespace(r.metadata.namespace.as_deref().unwrap_or_default());
                    index.apply(r);
                    (ns, None)
                }
                Event::DeleteRoute(ns, name) => {
                    index.delete::<LaneRoute>(ns, &name);
                    (ns, None)
                }
                Event::Rule(r) => {
                    let ns = namespace(r.metadata.namespace.as_deref().unwrap_or_default());
                    index.apply(r);
                    (ns, None)
                }
                Event::DeleteRule(ns, name) => {
                    index.delete::<TagRule>(ns, &name);
                    (ns, None)
                }
            };
            match (affected, cached.get_mut(ns)) {
                (Some(services), Some(desired)) => index.refresh(desired, ns, &services, now()),
                _ => {
                    cached.insert(ns, index.desired(ns, now()));
                }
            }
            for (ns, desired) in &cached {
                prop_assert_eq!(desired, &index.desired(ns, now()), "namespace {}", ns);
            }
            let rules = index.tag_rules(now());
            for report in rules.reports.values() {
                if let Some(rule) = &report.dubbo {
                    prop_assert!(rule.content.starts_with("configVersion: v3.0\n"));
                }
            }
        }
    }
}
