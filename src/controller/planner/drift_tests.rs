//! Outputs changed by hand, fed hand-built namespaces (see `tests.rs`): written back, and told
//! apart from outputs written with another hash; and which slices with laneway's label are
//! laneway's to delete.

use std::collections::BTreeSet;

use super::tests::*;
use super::*;
use crate::lanes::{Guard, ServiceInfo};
use crate::writer::OutputKind;

/// `w` applied, with a LaneEntry's route, and each of `names` changed by hand at version 7.
fn changed_by_hand(names: &[(OutputKind, String)]) -> World {
    let mut w = World::new(true);
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    w.applied();
    for (kind, name) in names {
        let live = w.live.get_mut(&target(*kind, name)).expect("live");
        live.drifted = true;
        live.version = Some("7".into());
    }
    w
}

/// The outputs of the plan of `w`, and how each would be written.
fn written(w: &World) -> BTreeMap<Target, Known> {
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    built
        .plan
        .phases
        .into_iter()
        .flatten()
        .filter_map(|s| match s.op {
            Op::Apply { output, known, .. } => Some((output.target(), known)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_output_changed_by_hand_is_written_back_and_counted_as_a_repair() {
    let w = changed_by_hand(&[]);
    let slice = w.desired.slices.keys().next().expect("a slice").clone();
    let baseline = naming::baseline_service_name("order");
    let route = w.desired.http_routes.keys().next().expect("a route").clone();
    assert!(written(&w).is_empty(), "nothing changed");

    let changed = [
        (OutputKind::Service, baseline.clone()),
        (OutputKind::EndpointSlice, slice.clone()),
        (OutputKind::HttpRoute, route.clone()),
    ];
    let w = changed_by_hand(&changed);
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    let repairs: BTreeSet<Target> = built.repairs.into_iter().collect();
    let expected: BTreeSet<Target> = changed.iter().map(|(k, n)| target(*k, n)).collect();
    assert_eq!(repairs, expected);
    // Each is replaced whole at the version seen, the route too: an apply would keep what the
    // hand added beside laneway's fields.
    let how = written(&w);
    assert_eq!(how.len(), 3, "{how:?}");
    assert!(how.values().all(|k| *k == Known::At("7".into())), "{how:?}");
}

#[tokio::test]
async fn an_output_written_with_another_hash_is_no_repair() {
    let mut w = changed_by_hand(&[]);
    let slice = w.desired.slices.keys().next().expect("a slice").clone();
    let live = w
        .live
        .get_mut(&target(OutputKind::EndpointSlice, &slice))
        .expect("live");
    live.hash = Some("old".into());
    live.drifted = true;
    let built = build(&w.input(), &mut Told::default(), Vec::new());
    assert!(built.repairs.is_empty(), "{:?}", built.repairs);
    assert!(written(&w).contains_key(&target(OutputKind::EndpointSlice, &slice)));
}

#[tokio::test]
async fn a_labelled_slice_laneway_did_not_write_goes_only_under_a_service_it_guards() {
    let mut w = World::new(true);
    w.applied();
    let guarded = ServiceInfo {
        guard: Guard::Guarded,
        selector: None,
        ..service("web")
    };
    w.index.apply(guarded);
    w.resolve();
    w.applied();
    let slices = [
        ("users-slice", Some("order")),
        ("no-service-slice", Some("gone")),
        ("web-extra", Some("web")),
        ("order--old", None),
    ];
    for (name, service) in slices {
        let live = Live {
            guarded_by: service.map(str::to_owned),
            ..Live::default()
        };
        w.live.insert(target(OutputKind::EndpointSlice, name), live);
    }
    let deleted = applied_targets(&planned_deletes(&w).others);
    assert_eq!(
        deleted,
        [
            target(OutputKind::EndpointSlice, "order--old"),
            target(OutputKind::EndpointSlice, "web-extra"),
        ]
    );
}
