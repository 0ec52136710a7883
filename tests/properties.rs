//! Invariants of DESIGN.md section 5 that the core owns, over random worlds.

mod fixtures;

use std::collections::{BTreeMap, BTreeSet};

use fixtures::*;
use kube::ResourceExt;
use laneway::api::{LaneRoute, SubsetSource};
use laneway::lanes::{self, naming, Content, Desired, PodInfo, RouteReport, ServiceInfo, TagRules};
use proptest::prelude::*;

const LANES: [&str; 4] = ["gray", "dev-alice", "feature-x", "blue"];
const SERVICES: usize = 5;

fn arb_pod(i: usize) -> impl Strategy<Value = PodInfo> {
    (
        0..SERVICES,
        prop::option::of(0..LANES.len()),
        any::<bool>(),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.1),
        (any::<bool>(), prop::bool::weighted(0.1)),
    )
        .prop_map(move |(svc, lane, v2, ready, leaving, (dual, no_http))| {
            let mut p = pod(
                &format!("p{i}"),
                &format!("s{svc}"),
                lane.map(|l| LANES[l]),
                &format!("10.0.{}.{}", i / 250, i % 250 + 1),
            );
            if v2 {
                p.labels.insert("version".into(), "v2".into());
            }
            if dual {
                p.ips.push(format!("fd00::{:x}", i + 1));
            }
            if no_http {
                p.ports.retain(|port| port.name.as_deref() != Some("http"));
            }
            p.ready = ready;
            p.terminating = leaving;
            p
        })
}

fn arb_route(lane: usize) -> impl Strategy<Value = LaneRoute> {
    (
        prop::collection::btree_set(0..SERVICES + 1, 1..4),
        prop::collection::vec(0..LANES.len(), 0..3),
        prop::bool::weighted(0.25),
    )
        .prop_map(move |(services, fallback, strict)| {
            let services: Vec<String> = services.into_iter().map(|s| format!("s{s}")).collect();
            let mut seen = BTreeSet::new();
            let fallback: Vec<&str> = fallback
                .into_iter()
                .filter(|f| *f != lane && seen.insert(*f))
                .map(|f| LANES[f])
                .collect();
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            route(LANES[lane], &names, &fallback, strict)
        })
}

fn arb_world() -> impl Strategy<Value = World> {
    let pods = (0..120usize).prop_flat_map(|n| (0..n).map(arb_pod).collect::<Vec<_>>());
    let routes = prop::collection::btree_set(0..LANES.len(), 0..=LANES.len())
        .prop_flat_map(|lanes| lanes.into_iter().map(arb_route).collect::<Vec<_>>());
    let rules = (prop::option::of(0..SERVICES), 0..LANES.len()).prop_map(|(svc, lane)| match svc {
        Some(s) => {
            let app = format!("s{s}");
            vec![tag_rule(
                &format!("rule-{app}"),
                &app,
                &[(LANES[lane], &[("version", "v2")])],
                Some(&format!("{app}-dubbo")),
            )]
        }
        None => Vec::new(),
    });
    (pods, routes, rules).prop_map(|(pods, routes, rules)| World {
        pods,
        services: (0..SERVICES).map(|i| service(&format!("s{i}"))).collect(),
        routes,
        rules,
    })
}

fn tags_by_pod(w: &World) -> BTreeMap<String, BTreeSet<String>> {
    // Recomputed from the inputs, independently of the index.
    w.pods
        .iter()
        .map(|p| {
            let mut tags = BTreeSet::new();
            if let Some(l) = p.labels.get("laneway.io/lane") {
                tags.insert(l.clone());
            }
            for r in &w.rules {
                let app = r.spec.selector.match_labels.as_ref().and_then(|m| m.get("app"));
                if p.labels.get("app") == app && p.labels.get("version").map(String::as_str) == Some("v2") {
                    tags.extend(r.spec.tags.iter().map(|t| t.name.clone()));
                }
            }
            (p.name.clone(), tags)
        })
        .collect()
}

fn endpoint_pods(d: &Desired, service_name: &str) -> Vec<String> {
    d.slices
        .values()
        .filter(|s| s.labels().get("kubernetes.io/service-name").map(String::as_str) == Some(service_name))
        .flat_map(|s| {
            s.endpoints
                .iter()
                .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        })
        .collect()
}

fn render(d: &Desired, rules: &TagRules) -> String {
    let mut out = String::new();
    for s in d.services.values() {
        out += &serde_json::to_string(&*s.object).expect("json");
    }
    for s in d.slices.values() {
        out += &serde_json::to_string(&*s.object).expect("json");
    }
    out += &format!("{:?}{:?}", d.routes, d.problems);
    for (k, r) in &rules.reports {
        out += &format!("{k}{:?}", r.dubbo);
    }
    out
}

fn is_dns1035(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn baseline_stays_clean(w in arb_world()) {
        let idx = w.index();
        let d = idx.desired(NS, now());
        let tags = tags_by_pod(&w);
        for svc in d.services.values().filter(|s| s.labels().get("laneway.io/role").map(String::as_str) == Some("baseline")) {
            for p in endpoint_pods(&d, &svc.name_any()) {
                prop_assert!(tags[&p].is_empty(), "tagged pod {} in baseline {}", p, svc.name_any());
            }
        }
    }

    #[test]
    fn no_untagged_pod_is_listed_under_a_dubbo_tag(w in arb_world()) {
        let idx = w.index();
        let tags = tags_by_pod(&w);
        let untagged: BTreeSet<String> = w.pods.iter().filter(|p| tags[&p.name].is_empty()).map(|p| format!("\"{}:20880\"", p.ips[0])).collect();
        for report in idx.tag_rules(now()).reports.values() {
            if let Some(rule) = &report.dubbo {
                for addr in &untagged {
                    prop_assert!(!rule.content.contains(addr.as_str()), "{} listed in\n{}", addr, rule.content);
                }
            }
        }
    }

    #[test]
    fn output_is_deterministic_whatever_the_input_order(w in arb_world(), seed in any::<u64>()) {
        let a = w.index();
        let mut shuffled = w.clone();
        let mut rng = seed;
        let mut next = || { rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (rng >> 33) as usize };
        for i in (1..shuffled.pods.len()).rev() { let j = next() % (i + 1); shuffled.pods.swap(i, j); }
        shuffled.routes.reverse();
        shuffled.services.reverse();
        let b = shuffled.index();
        prop_assert_eq!(render(&a.desired(NS, now()), &a.tag_rules(now())), render(&b.desired(NS, now()), &b.tag_rules(now())));
    }

    #[test]
    fn each_subset_comes_from_the_first_tier_with_a_ready_pod(w in arb_world()) {
        let idx = w.index();
        let d = idx.desired(NS, now());
        let plan = lanes::lane_plan(&idx, NS, now());
        let tags = tags_by_pod(&w);
        for (route, report) in &d.routes {
            let Some(def) = plan.lanes.get(&report.lane).filter(|l| l.route.name == *route) else { continue };
            for st in &report.services {
                if !w.services.iter().any(|s| s.name == st.name) { continue; }
                let app = |p: &&PodInfo| p.labels.get("app") == Some(&st.name) && p.is_endpoint();
                let ready_in = |tag: Option<&str>| w.pods.iter().filter(app).any(|p| p.is_ready() && match tag {
                    Some(t) => tags[&p.name].contains(t),
                    None => tags[&p.name].is_empty(),
                });
                let expected = if ready_in(Some(&def.lane)) {
                    SubsetSource::Lane
                } else if let Some(f) = def.chain.iter().find(|f| ready_in(Some(f))) {
                    SubsetSource::Fallback(f.clone())
                } else if !def.strict && ready_in(None) {
                    SubsetSource::Baseline
                } else {
                    SubsetSource::Empty
                };
                prop_assert_eq!(&st.source, &expected, "{} in {}", st.name, route);
                if def.strict {
                    prop_assert_ne!(&st.source, &SubsetSource::Baseline);
                }
                // Served by reference: the Service of the tier the subset comes from.
                let lane_service = |l: &str| naming::lane_service_name(&st.name, l);
                let baseline = naming::baseline_service_name(&st.name);
                let served_by = st.served_by.clone().unwrap_or_default();
                let tier = match &st.source {
                    SubsetSource::Lane => Some(def.lane.clone()),
                    SubsetSource::Fallback(f) => Some(f.clone()),
                    SubsetSource::Baseline => None,
                    SubsetSource::Empty => (served_by != baseline).then(|| def.lane.clone()),
                };
                let expected = tier.as_deref().map_or(baseline.clone(), lane_service);
                prop_assert_eq!(&served_by, &expected, "{} in {}", st.name, route);
                prop_assert!(d.services.contains_key(&served_by), "{} not written", served_by);
                for m in endpoint_pods(&d, &served_by) {
                    let ok = match &tier {
                        Some(t) => tags[&m].contains(t),
                        None => tags[&m].is_empty(),
                    };
                    prop_assert!(ok, "{} does not belong to {:?} of {}", m, st.source, route);
                }
            }
        }
    }

    #[test]
    fn services_and_slices_are_built_in_the_form_their_content_is_compared_in(w in arb_world()) {
        let d = w.index().desired(NS, now());
        for s in d.services.values() {
            prop_assert_eq!(&s.object.canonical(), &*s.object);
            prop_assert_eq!(&s.object.content_hash(), &s.hash);
        }
        for s in d.slices.values() {
            prop_assert_eq!(&s.object.canonical(), &*s.object);
            prop_assert_eq!(&s.object.content_hash(), &s.hash);
        }
    }

    #[test]
    fn slices_are_bounded_and_names_are_valid_and_unique(w in arb_world()) {
        let d = w.index().desired(NS, now());
        let user: BTreeSet<&str> = w.services.iter().map(|s| s.name.as_str()).collect();
        for name in d.services.keys() {
            prop_assert!(is_dns1035(name), "{}", name);
            prop_assert!(!user.contains(name.as_str()));
        }
        let mut seen = BTreeSet::new();
        for (name, s) in &d.slices {
            prop_assert!(s.endpoints.len() <= 100);
            prop_assert!(name.len() <= 253 && seen.insert(name.clone()));
            let families: BTreeSet<bool> = s.endpoints.iter().map(|e| e.addresses[0].contains(':')).collect();
            prop_assert!(families.len() <= 1, "mixed families in {}", name);
        }
        let mut lane_services = BTreeSet::new();
        for r in d.routes.values() {
            for s in &r.services {
                if let Some(name) = &s.lane_service {
                    prop_assert!(d.services.contains_key(name));
                    prop_assert!(lane_services.insert(name.clone()), "{} used twice", name);
                    prop_assert_ne!(name, &naming::baseline_service_name(&s.name));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// After a pod changes, or one of laneway's lane Services comes or goes, refreshing only the
    /// services it touched gives exactly what a full recomputation gives.
    #[test]
    fn refreshing_affected_services_equals_recomputing_everything(
        w in arb_world(),
        events in prop::collection::vec((any::<prop::sample::Index>(), 0..5u8), 1..6),
    ) {
        prop_assume!(!w.pods.is_empty());
        let mut idx = w.index();
        let mut incremental = idx.desired(NS, now());
        for (which, change) in events {
            // What laneway wrote exists: the watch shows its Services.
            let mut written = BTreeSet::new();
            for svc in incremental.services.values() {
                let info = ServiceInfo::from_service(svc).expect("service");
                written.extend(idx.apply(info).services);
            }
            idx.refresh(&mut incremental, NS, &written, now());
            prop_assert_eq!(&incremental, &idx.desired(NS, now()));
            let pod = which.get(&w.pods).clone();
            let lane_services: Vec<String> = incremental
                .services
                .keys()
                .filter(|n| !n.contains("--baseline-"))
                .cloned()
                .collect();
            let affected = match change {
                0 => idx.delete::<PodInfo>(NS, &pod.name),
                1 => idx.apply(PodInfo { ready: !pod.ready, ..pod }),
                2 => idx.apply(with_label(pod, "laneway.io/lane", "gray")),
                3 => idx.apply(with_label(pod, "version", "v2")),
                _ if lane_services.is_empty() => continue,
                _ => idx.delete::<ServiceInfo>(NS, which.get(&lane_services).as_str()),
            };
            prop_assert!(!affected.whole_namespace);
            let before = incremental.routes.clone();
            idx.refresh(&mut incremental, NS, &affected.services, now());
            prop_assert_eq!(&incremental, &idx.desired(NS, now()));
            // A report keeps its stamp only unchanged, and its shape exactly when nothing but its
            // endpoint counts changed.
            for (name, was) in &before {
                let is = &incremental.routes[name];
                if is.stamp == was.stamp {
                    prop_assert_eq!(is, was, "{} kept its stamp", name);
                }
                let same_shape = without_counts(is) == without_counts(was);
                prop_assert_eq!(is.shape == was.shape, same_shape, "{}: {:?} -> {:?}", name, was, is);
            }
        }
    }
}

/// `report` with every endpoint count zeroed.
fn without_counts(report: &RouteReport) -> RouteReport {
    let mut report = report.clone();
    for s in &mut report.services {
        s.endpoints = s.endpoints.map(|_| 0);
    }
    report
}
