//! The planner's steps, fed hand-built namespaces: no API server. (A `Publishing` holds a
//! client that is never called, hence the Tokio runtime.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::*;
use crate::api::{LaneEntry, LaneRoute, LaneRouteSpec, TagRule};
use crate::controller::events::Told;
use crate::controller::gateways::Gateways;
use crate::controller::planner::pacing::COUNT_BUDGET;
use crate::controller::planner::pacing::STATUS_SPACING;
use crate::controller::publishing::Publishing;
use crate::controller::schedule::Retries;
use crate::lanes::{Config, ContainerPortInfo, Content, Desired, Index, PodInfo, ServiceInfo, TagRules};
use crate::publish::{ConfigMapCentre, RuleSet};
use crate::writer::{OutputKind, OwnKind, Status};

pub(crate) const NS: &str = "shop";

pub(crate) fn pod(name: &str, app: &str, lane: Option<&str>, ip: &str) -> PodInfo {
    let mut labels = BTreeMap::from([("app".to_owned(), app.to_owned())]);
    if let Some(lane) = lane {
        labels.insert("laneway.io/lane".into(), lane.into());
    }
    PodInfo {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        labels,
        ips: vec![ip.into()],
        ready: true,
        terminating: false,
        terminal: false,
        node_name: None,
        ports: vec![ContainerPortInfo {
            name: Some("http".into()),
            port: 8080,
            protocol: "TCP".into(),
        }],
    }
}

pub(crate) fn service(name: &str) -> ServiceInfo {
    ServiceInfo {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-svc-{name}"),
        selector: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
        ports: vec![ServicePort {
            name: Some("http".into()),
            port: 80,
            target_port: Some(IntOrString::String("http".into())),
            ..Default::default()
        }],
        ip_families: vec!["IPv4".into()],
        ..Default::default()
    }
}

pub(crate) fn route(name: &str, services: &[&str], finalized: bool) -> LaneRoute {
    let mut r = LaneRoute::new(
        name,
        LaneRouteSpec {
            lane: None,
            services: Some(services.iter().map(|s| s.to_string()).collect()),
            service_selector: None,
            fallback: Vec::new(),
            strict: false,
            match_: None,
            weight: 0,
            rpc_entry: None,
            ttl: None,
        },
    );
    r.metadata.namespace = Some(NS.into());
    r.metadata.resource_version = Some("7".into());
    r.metadata.uid = Some(format!("uid-lr-{name}"));
    r.metadata.finalizers = finalized.then(|| vec![FINALIZER.to_owned()]);
    r
}

pub(crate) fn edge_entry(name: &str, service: &str) -> LaneEntry {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-le-{name}"), "finalizers": [FINALIZER]},
        "spec": {"parentRefs": [{"name": "public"}], "rules": [{"backend": {"service": service, "port": 80}}]},
    }))
    .expect("entry")
}

/// One namespace as the controller knows it, and what a plan of it is made from.
pub(crate) struct World {
    pub(crate) index: Index,
    pub(crate) desired: Desired,
    pub(crate) live: LiveObjects,
    pub(crate) rules: TagRules,
    pub(crate) publishing: Publishing,
    pub(crate) gateways: Gateways,
    pub(crate) failed: BTreeMap<Target, WriteError>,
    pub(crate) retries: Retries<Target>,
    pub(crate) deleting: BTreeMap<(OwnKind, ObjectKey), Option<TagRule>>,
    pub(crate) triggers: BTreeMap<String, Timestamp>,
    pub(crate) released: BTreeSet<String>,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) written: BTreeMap<String, Instant>,
    pub(crate) memo: RouteMemo,
    pub(crate) budget: CountBudget,
}

impl World {
    /// `order` with a baseline pod and a `gray` one, in LaneRoute `gray`.
    pub(crate) fn new(gray_finalized: bool) -> World {
        let index = Index::from_objects(
            Config::default(),
            [
                pod("order-1", "order", None, "10.0.0.1"),
                pod("order-gray", "order", Some("gray"), "10.0.0.2"),
            ],
            [service("order")],
            [route("gray", &["order"], gray_finalized)],
            [],
        );
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("url")))
            .expect("client");
        let configmap = Arc::new(ConfigMapCentre::new(client, "laneway", "rules"));
        let publishing = Publishing::new(
            configmap,
            Vec::new(),
            watch::channel(RuleSet::default()).0,
            None,
            mpsc::unbounded_channel().1,
        );
        let mut world = World {
            desired: Desired::default(),
            index,
            live: LiveObjects::new(),
            rules: TagRules::default(),
            publishing,
            gateways: Gateways {
                api: Some(true),
                ..Default::default()
            },
            failed: BTreeMap::new(),
            retries: Retries::default(),
            deleting: BTreeMap::new(),
            triggers: BTreeMap::new(),
            released: BTreeSet::new(),
            hold_until: None,
            written: BTreeMap::new(),
            memo: RouteMemo::default(),
            budget: CountBudget::new(COUNT_BUDGET),
        };
        world.resolve();
        world
    }

    pub(crate) fn resolve(&mut self) {
        self.desired = self.index.desired(NS, Timestamp::now());
    }

    /// Everything desired, as if it had been applied.
    pub(crate) fn applied(&mut self) {
        let services = self
            .desired
            .services
            .iter()
            .map(|(n, s)| (OutputKind::Service, n, s.hash.clone()));
        let slices = self
            .desired
            .slices
            .iter()
            .map(|(n, s)| (OutputKind::EndpointSlice, n, s.hash.clone()));
        let routes = self
            .desired
            .http_routes
            .iter()
            .map(|(n, r)| (OutputKind::HttpRoute, n, r.content_hash()));
        self.live = services
            .chain(slices)
            .chain(routes)
            .map(|(kind, name, hash)| (target(kind, name), Live::hashed(Some(hash))))
            .collect();
    }

    pub(crate) fn input(&self) -> Input<'_> {
        Input {
            space: Snapshot {
                ns: NS,
                desired: &self.desired,
                live: &self.live,
                index: &self.index,
                failed: &self.failed,
                retries: &self.retries,
                deleting: &self.deleting,
                triggers: &self.triggers,
            },
            outside: Outside {
                rules: &self.rules,
                publishing: &self.publishing,
                gateways: &self.gateways,
            },
            statuses: StatusContext {
                book: StatusBook {
                    verify: false,
                    written: &self.written,
                    memo: &self.memo,
                    budget: self.budget,
                },
                clock: Clock {
                    instant: Instant::now(),
                    now: Timestamp::now(),
                },
            },
            grace: RouteGrace {
                released: &self.released,
                hold_until: self.hold_until,
            },
            tail_busy: false,
        }
    }
}

pub(crate) fn target(kind: OutputKind, name: &str) -> Target {
    Target {
        kind,
        key: ObjectKey::new(NS, name),
    }
}

/// What the plan of `w` deletes.
pub(crate) fn planned_deletes(w: &World) -> Deletes {
    let input = w.input();
    let compared = Compared::new(&w.desired, &w.live);
    deletes(
        &input.space,
        input.outside.routes_served(),
        &input.held(),
        &compared.unwanted,
    )
}

pub(crate) fn applied_targets(steps: &[Step]) -> Vec<Target> {
    steps
        .iter()
        .filter_map(|s| match s.op.subject() {
            Subject::Output(t) => Some(t),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn finalizers_go_on_each_object_that_lacks_one_and_outputs_wait_only_for_owners() {
    let mut w = World::new(false);
    w.index.apply(edge_entry("web", "order"));
    let (steps, adding) = finalizers_on(&w.index, NS);
    let kinds: Vec<(OwnKind, bool)> = steps
        .iter()
        .map(|s| match &s.op {
            Op::Finalizer { kind, present, .. } => (*kind, *present),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [(OwnKind::LaneRoute, true)],
        "the entry has its finalizer already"
    );
    assert_eq!(adding, BTreeSet::from([(OwnKind::LaneRoute, "gray".to_owned())]));
}

#[tokio::test]
async fn applies_write_what_differs_after_the_owners_finalizer_and_statuses_wait_for_them() {
    let w = World::new(false);
    let input = w.input();
    let (_, adding) = finalizers_on(&w.index, NS);
    let compared = Compared::new(&w.desired, &w.live);
    let mut owned = Owned::new(&input.space, &adding);
    let steps = applies(&input.space, &compared, &input.held(), &mut owned);
    let written = applied_targets(&steps);
    let lane = naming::lane_service_name("order", "gray");
    assert!(
        written.contains(&target(OutputKind::Service, &lane)),
        "{written:?}"
    );
    assert!(
        written.iter().any(|t| t.kind == OutputKind::EndpointSlice),
        "{written:?}"
    );
    let gray_finalizer = Subject::Finalizer(OwnKind::LaneRoute, ObjectKey::new(NS, "gray"));
    let lane_step = steps
        .iter()
        .find(|s| s.op.subject() == Subject::Output(target(OutputKind::Service, &lane)))
        .expect("lane Service");
    assert_eq!(lane_step.needs, [gray_finalizer]);
    let touched = &owned.touched[&(OwnKind::LaneRoute, "gray".to_owned())];
    assert!(touched.contains(&Subject::Output(target(OutputKind::Service, &lane))));

    let mut w = World::new(true);
    w.applied();
    let input = w.input();
    let compared = Compared::new(&w.desired, &w.live);
    let adding = BTreeSet::new();
    let mut owned = Owned::new(&input.space, &adding);
    assert!(
        applies(&input.space, &compared, &input.held(), &mut owned).is_empty(),
        "applied with the same hash"
    );
}

#[tokio::test]
async fn a_route_waits_for_the_services_it_names_and_none_is_written_without_the_gateway_api() {
    let mut w = World::new(true);
    w.applied();
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    // The baseline Service changed since it was applied: the route must wait for it.
    let baseline = naming::baseline_service_name("order");
    w.live.insert(
        target(OutputKind::Service, &baseline),
        Live::hashed(Some("old".into())),
    );
    let input = w.input();
    let compared = Compared::new(&w.desired, &w.live);
    let adding = BTreeSet::new();
    let mut owned = Owned::new(&input.space, &adding);
    let services = applies(&input.space, &compared, &input.held(), &mut owned);
    let routes = route_applies(
        &input.space,
        input.outside.routes_served(),
        &compared,
        &services,
        &mut owned,
    );
    assert_eq!(routes.len(), w.desired.http_routes.len());
    assert!(!routes.is_empty());
    assert!(
        routes[0]
            .needs
            .contains(&Subject::Output(target(OutputKind::Service, &baseline))),
        "{:?}",
        routes[0].needs
    );

    w.gateways.api = None;
    let input = w.input();
    let mut owned = Owned::new(&input.space, &adding);
    assert!(route_applies(
        &input.space,
        input.outside.routes_served(),
        &compared,
        &services,
        &mut owned
    )
    .is_empty());
}

#[tokio::test]
async fn finalizers_come_off_after_every_output_write_and_not_while_one_is_kept() {
    let mut w = World::new(true);
    w.deleting
        .insert((OwnKind::LaneRoute, ObjectKey::new(NS, "gone")), None);
    w.deleting
        .insert((OwnKind::TagRule, ObjectKey::new(NS, "rule")), None);
    w.deleting
        .insert((OwnKind::LaneRoute, ObjectKey::new("elsewhere", "x")), None);
    let input = w.input();
    let outputs = vec![Subject::Output(target(OutputKind::Service, "order--baseline-0"))];
    let released = Released {
        kept: false,
        outputs: outputs.clone(),
    };
    let steps = finalizers_off(&input.space, &input.outside, &released);
    let off: Vec<(OwnKind, String, Vec<Subject>)> = steps
        .iter()
        .map(|s| match &s.op {
            Op::Finalizer {
                kind,
                key,
                present: false,
            } => (*kind, key.name.clone(), s.needs.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        off,
        [
            (OwnKind::LaneRoute, "gone".to_owned(), outputs),
            (OwnKind::TagRule, "rule".to_owned(), Vec::new())
        ]
    );
    let kept = Released {
        kept: true,
        outputs: Vec::new(),
    };
    let kinds: Vec<OwnKind> = finalizers_off(&input.space, &input.outside, &kept)
        .iter()
        .map(|s| s.op.subject())
        .filter_map(|s| match s {
            Subject::Finalizer(k, _) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, [OwnKind::TagRule]);
}

#[tokio::test]
async fn a_fresh_namespace_is_planned_in_order_and_a_busy_tail_is_left_to_the_next_plan() {
    let w = World::new(false);
    let mut told = Told::default();
    let built = build(&w.input(), &mut told, Vec::new());
    let first: Vec<Subject> = built.plan.phases[0].iter().map(|s| s.op.subject()).collect();
    assert_eq!(
        first,
        [Subject::Finalizer(OwnKind::LaneRoute, ObjectKey::new(NS, "gray"))]
    );
    assert!(matches!(built.plan.phases[1][0].op, Op::Apply { .. }));
    let tail = built.plan.tail.as_ref().expect("tail");
    // At the version its finalizer leaves.
    assert!(
        tail[0].iter().any(|s| matches!(
            &s.op,
            Op::Status {
                status: Status::LaneRoute(_),
                version: None,
                ..
            }
        )),
        "{tail:?}"
    );
    assert_eq!(built.statuses_written, ["gray"]);
    // With the finalizer on, at the version the watches show.
    let on = World::new(true);
    let built = build(&on.input(), &mut Told::default(), Vec::new());
    let tail = built.plan.tail.as_ref().expect("tail");
    let versions: Vec<_> = tail[0]
        .iter()
        .filter_map(|s| match &s.op {
            Op::Status { version, .. } => Some(version.as_deref()),
            _ => None,
        })
        .collect();
    assert_eq!(versions, [Some("7")]);

    let mut busy = w.input();
    busy.tail_busy = true;
    let built = build(&busy, &mut Told::default(), Vec::new());
    assert!(built.plan.tail.is_none() && built.memo.is_none());
    assert!(!built.plan.phases.is_empty());
}

#[tokio::test]
async fn owners_are_read_from_owner_references_of_laneway_kinds_only() {
    let w = World::new(true);
    let (_, service) = w.desired.services.iter().next().expect("a Service");
    let mut object = (*service.object).clone();
    let owned = owners(&object);
    assert_eq!(owned, [(OwnKind::LaneRoute, "gray".to_owned())]);
    // A kind of that name in another group is not laneway's.
    for o in object.meta_mut().owner_references.iter_mut().flatten() {
        o.api_version = "example.com/v1".into();
    }
    assert!(owners(&object).is_empty());
}

#[tokio::test]
async fn a_status_change_within_a_second_of_the_last_write_goes_once_the_second_has_passed() {
    let mut w = World::new(true);
    w.applied();
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    assert_eq!(built.statuses_written, ["gray"], "never written: at once");

    w.written.insert("gray".into(), Instant::now());
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    assert!(built.statuses_written.is_empty());
    let wake = built.wake_at.expect("looked at again");
    let soon = Instant::now() + STATUS_SPACING;
    assert!(soon - STATUS_SPACING / 2 < wake && wake <= soon, "{wake:?}");

    w.written.insert("gray".into(), Instant::now() - STATUS_SPACING);
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    assert_eq!(built.statuses_written, ["gray"]);
}

#[tokio::test]
async fn slices_and_services_not_there_are_created_and_those_seen_at_a_version_are_replaced_at_it() {
    let mut w = World::new(true);
    let how = |w: &World| -> BTreeMap<Target, Known> {
        let input = w.input();
        let compared = Compared::new(&w.desired, &w.live);
        let adding = BTreeSet::new();
        let mut owned = Owned::new(&input.space, &adding);
        applies(&input.space, &compared, &input.held(), &mut owned)
            .into_iter()
            .map(|s| match s.op {
                Op::Apply { output, known, .. } => (output.target(), known),
                other => panic!("not an apply: {other:?}"),
            })
            .collect()
    };
    let first = how(&w);
    assert!(first.iter().any(|(t, _)| t.kind == OutputKind::Service));
    for (target, known) in &first {
        let expected = match target.kind {
            OutputKind::EndpointSlice | OutputKind::Service => Known::Absent,
            _ => Known::Unsure,
        };
        assert_eq!(*known, expected, "{target}");
    }

    w.applied();
    let (slice, service) = (
        w.desired.slices.keys().next().expect("a slice").clone(),
        w.desired.services.keys().next().expect("a Service").clone(),
    );
    for (kind, name) in [
        (OutputKind::EndpointSlice, &slice),
        (OutputKind::Service, &service),
    ] {
        let live = w.live.get_mut(&target(kind, name)).expect("live");
        *live = Live {
            hash: Some("old".into()),
            version: Some("42".into()),
            ..Live::default()
        };
    }
    let then = how(&w);
    assert_eq!(
        then,
        BTreeMap::from([
            (target(OutputKind::EndpointSlice, &slice), Known::At("42".into())),
            (target(OutputKind::Service, &service), Known::At("42".into())),
        ])
    );
}
