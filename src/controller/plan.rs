//! From what a namespace should hold and what it holds to the writes that close the gap, as a
//! [`Plan`] in phases: finalizers on; Services and EndpointSlices; deletions; statuses;
//! finalizers off; Events. Nothing here talks to the API.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::events::Told;
use super::publishing::Publishing;
use crate::api::TagRule;
use crate::lanes::{naming, Desired, Index, Kind, ObjectKey, Problem, TagRules, SERVICE_NAME_LABEL};
use crate::status;
use crate::writer::{Op, Output, OutputKind, Plan, Step, Subject, Target, WriteError, FINALIZER};

/// The outputs that exist in one namespace, with the hash each was applied with.
pub(super) type LiveObjects = BTreeMap<Target, Option<String>>;

/// Content hash of an object as laneway applies it.
pub(super) fn content_hash<T: serde::Serialize>(obj: &T) -> String {
    naming::digest(&[&serde_json::to_string(obj).unwrap_or_default()])
}

/// Everything a namespace's plan is made from.
pub(super) struct Input<'a> {
    pub ns: &'a str,
    pub desired: &'a Desired,
    pub live: &'a LiveObjects,
    pub index: &'a Index,
    pub rules: &'a TagRules,
    pub publishing: &'a Publishing,
    /// The last failed write of each output.
    pub failed: &'a BTreeMap<Target, WriteError>,
    /// LaneRoutes and TagRules of this namespace being deleted, waiting for their finalizer.
    pub deleting: &'a BTreeMap<(Kind, ObjectKey), Option<TagRule>>,
    /// Write statuses even where the object already shows them.
    pub verify_statuses: bool,
    pub now: Timestamp,
}

fn has_finalizer(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == FINALIZER)
}

/// The LaneRoutes (by name) that own an object, from its owner references.
fn owners<K: Resource>(obj: &K) -> Vec<String> {
    obj.owner_references()
        .iter()
        .filter(|o| o.kind == "LaneRoute")
        .map(|o| o.name.clone())
        .collect()
}

/// Problems caused by writes the API server refused (not worth retrying as they are).
pub(super) fn rejected(ns: &str, desired: &Desired, failed: &BTreeMap<Target, WriteError>) -> Vec<Problem> {
    failed
        .iter()
        .filter(|(_, e)| !e.is_transient())
        .filter_map(|(target, e)| {
            let routes = output_owners(desired, target)?;
            Some(Problem::WriteRejected {
                routes: routes.iter().map(|r| ObjectKey::new(ns, r)).collect(),
                object: target.to_string(),
                message: e.to_string(),
            })
        })
        .collect()
}

fn output_owners(desired: &Desired, target: &Target) -> Option<Vec<String>> {
    match target.kind {
        OutputKind::Service => desired.services.get(&target.key.name).map(owners),
        OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(owners),
    }
}

/// Forgets failures of outputs that need no write any more: applied since (by this replica or
/// seen applied), or neither wanted nor present.
pub(super) fn prune_failed(failed: &mut BTreeMap<Target, WriteError>, desired: &Desired, live: &LiveObjects) {
    failed.retain(|target, _| {
        let wanted = match target.kind {
            OutputKind::Service => desired.services.get(&target.key.name).map(content_hash),
            OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(content_hash),
        };
        match (wanted, live.get(target)) {
            (Some(hash), Some(Some(live))) => hash != *live,
            (Some(_), _) => true,
            (None, present) => present.is_some(),
        }
    });
}

/// The plan for one namespace, and the Events it tells (recorded in `told`).
pub(super) fn build(input: &Input, told: &mut Told, mut events: Vec<Op>) -> Plan {
    let Input {
        ns,
        desired,
        live,
        index,
        ..
    } = *input;
    let mut plan = Plan::new(ns);

    // 1. Finalizers go on before any output exists.
    let mut finalizers = Vec::new();
    for route in index.lane_routes(ns).filter(|r| !has_finalizer(r.finalizers())) {
        finalizers.push(Op::Finalizer {
            kind: Kind::LaneRoute,
            key: ObjectKey::new(ns, &route.name_any()),
            present: true,
        });
    }
    for rule in index.tag_rules_in(ns).filter(|r| !has_finalizer(r.finalizers())) {
        finalizers.push(Op::Finalizer {
            kind: Kind::TagRule,
            key: ObjectKey::new(ns, &rule.name_any()),
            present: true,
        });
    }
    let adding: BTreeSet<String> = finalizers
        .iter()
        .filter_map(|op| match op {
            Op::Finalizer {
                kind: Kind::LaneRoute,
                key,
                ..
            } => Some(key.name.clone()),
            _ => None,
        })
        .collect();
    plan.phase(finalizers.into_iter().map(Step::from).collect());

    // 2. Outputs whose content differs from what was applied, each after its owners'
    // finalizers.
    let mut applies = Vec::new();
    let mut touched: BTreeMap<String, Vec<Subject>> = BTreeMap::new();
    let mut apply = |output: Output, route_owners: Vec<String>| {
        let target = output.target();
        let hash = match &output {
            Output::Service(s) => content_hash(s),
            Output::Slice(s) => content_hash(s),
        };
        if live
            .get(&target)
            .is_some_and(|h| h.as_deref() == Some(hash.as_str()))
        {
            return;
        }
        let needs = route_owners
            .iter()
            .filter(|o| adding.contains(*o))
            .map(|o| Subject::Finalizer(Kind::LaneRoute, ObjectKey::new(ns, o)))
            .collect();
        // A route's status waits for writes of its outputs that have not failed before (a
        // known failure is already in the status).
        if !input.failed.contains_key(&target) {
            for o in route_owners {
                touched
                    .entry(o)
                    .or_default()
                    .push(Subject::Output(target.clone()));
            }
        }
        applies.push(Step {
            op: Op::Apply { output, hash },
            needs,
        });
    };
    for svc in desired.services.values() {
        apply(Output::Service(Box::new(svc.clone())), owners(svc));
    }
    for slice in desired.slices.values() {
        apply(Output::Slice(Box::new(slice.clone())), owners(slice));
    }
    let all_outputs: Vec<Subject> = applies.iter().map(|s| s.op.subject()).collect();
    plan.phase(applies);

    // 3. Outputs nobody wants any more.
    let wanted = |t: &Target| match t.kind {
        OutputKind::Service => desired.services.contains_key(&t.key.name),
        OutputKind::EndpointSlice => desired.slices.contains_key(&t.key.name),
    };
    let deletes: Vec<Step> = live
        .keys()
        .filter(|t| !wanted(t))
        .map(|t| Step::from(Op::Delete(t.clone())))
        .collect();
    let all_outputs: Vec<Subject> = all_outputs
        .into_iter()
        .chain(deletes.iter().map(|s| s.op.subject()))
        .collect();
    plan.phase(deletes);

    // 4. Statuses that differ from what the objects show; a route's status waits for its
    // outputs, so it never claims what failed.
    let mut statuses = route_statuses(input, &touched);
    statuses.extend(rule_statuses(input));
    plan.phase(statuses);

    // 5. Finalizers come off once what the object produced is gone.
    let mut releases = Vec::new();
    for ((kind, key), rule) in input.deleting.iter().filter(|((_, k), _)| k.namespace == ns) {
        let release = match (kind, rule) {
            (Kind::LaneRoute, _) => Some(all_outputs.clone()),
            (Kind::TagRule, Some(rule)) => input
                .publishing
                .may_release(rule, key, input.rules)
                .then(Vec::new),
            (Kind::TagRule, None) => Some(Vec::new()),
        };
        if let Some(needs) = release {
            releases.push(Step {
                op: Op::Finalizer {
                    kind: *kind,
                    key: key.clone(),
                    present: false,
                },
                needs,
            });
        }
    }
    plan.phase(releases);

    // 6. Events last: they never hold anything up.
    let rule_problems = input
        .rules
        .problems
        .iter()
        .filter(|p| p.subjects().iter().any(|(_, k)| k.namespace == ns));
    let write_problems = rejected(ns, desired, input.failed);
    let problems = desired
        .problems
        .iter()
        .chain(rule_problems)
        .chain(write_problems.iter());
    events.extend(told.tell(index, ns, desired, problems));
    plan.phase(events.into_iter().map(Step::from).collect());
    plan
}

fn route_statuses(input: &Input, touched: &BTreeMap<String, Vec<Subject>>) -> Vec<Step> {
    let Input {
        ns,
        desired,
        index,
        failed,
        now,
        ..
    } = *input;
    let rejected = rejected(ns, desired, failed);
    // Lane and baseline Services with a write still to be retried.
    let stale: BTreeSet<String> = failed
        .iter()
        .filter(|(_, e)| e.is_transient())
        .filter_map(|(t, _)| match t.kind {
            OutputKind::Service => Some(t.key.name.clone()),
            OutputKind::EndpointSlice => desired
                .slices
                .get(&t.key.name)
                .and_then(|s| s.labels().get(SERVICE_NAME_LABEL).cloned()),
        })
        .collect();
    let mut steps = Vec::new();
    for (name, report) in &desired.routes {
        let Some(route) = index.lane_route(ns, name) else {
            continue;
        };
        let key = ObjectKey::new(ns, name);
        let problems: Vec<&Problem> = desired
            .problems
            .iter()
            .chain(rejected.iter())
            .filter(|p| {
                p.subjects()
                    .iter()
                    .any(|(k, o)| *k == Kind::LaneRoute && *o == key)
            })
            .collect();
        let retrying: Vec<String> = failed
            .iter()
            .filter(|(t, e)| e.is_transient() && output_owners(desired, t).is_some_and(|o| o.contains(name)))
            .map(|(t, e)| format!("{t}: {e}"))
            .collect();
        let retrying = (!retrying.is_empty()).then(|| retrying.join("; "));
        let old = route.status.clone().unwrap_or_default();
        // A service whose lane Service still waits for a write keeps the entry it had, so that
        // the status never names a source its slices do not hold yet.
        let mut report = report.clone();
        for entry in &mut report.services {
            let waiting = entry.lane_service.as_ref().is_some_and(|l| stale.contains(l));
            if let Some(previous) = old
                .services
                .iter()
                .find(|o| o.name == entry.name)
                .filter(|_| waiting)
            {
                *entry = previous.clone();
            }
        }
        let mut status = status::lane_route_status(route.meta().generation, &report, &problems, retrying);
        status::carry_transition_times(&old.conditions, &mut status.conditions, &now.to_string());
        if route.status.as_ref() == Some(&status) && !input.verify_statuses {
            continue;
        }
        steps.push(Step {
            op: Op::Status {
                kind: Kind::LaneRoute,
                key,
                status: json!(status),
            },
            needs: touched.get(name).cloned().unwrap_or_default(),
        });
    }
    steps
}

fn rule_statuses(input: &Input) -> Vec<Step> {
    let Input {
        ns,
        index,
        rules,
        publishing,
        now,
        ..
    } = *input;
    let mut steps = Vec::new();
    for rule in index.tag_rules_in(ns) {
        let key = ObjectKey::new(ns, &rule.name_any());
        let Some(report) = rules.reports.get(&key) else {
            continue;
        };
        // Conflicting tags are found with the namespace's outputs, the rest with the rules.
        let problems: Vec<&Problem> = rules
            .problems
            .iter()
            .chain(input.desired.problems.iter())
            .filter(|p| p.subjects().iter().any(|(k, o)| *k == Kind::TagRule && *o == key))
            .collect();
        let publications = report
            .dubbo
            .as_ref()
            .map(|d| publishing.publications(&d.key))
            .unwrap_or_default();
        let pending = report.dubbo.as_ref().and_then(|d| {
            let failing: Vec<String> = publications
                .iter()
                .filter_map(|p| Some(format!("{}: {}", p.centre, p.last_error.as_ref()?)))
                .collect();
            if !failing.is_empty() {
                return Some(("Retrying", failing.join("; ")));
            }
            let behind: Vec<&str> = publishing
                .centres
                .iter()
                .copied()
                .filter(|c| {
                    !publications
                        .iter()
                        .any(|p| p.centre == *c && p.content_hash.as_deref() == Some(d.content_hash.as_str()))
                })
                .collect();
            (!behind.is_empty()).then(|| {
                (
                    "Publishing",
                    format!("not yet published to {}", behind.join(", ")),
                )
            })
        });
        let mut status = status::tag_rule_status(rule.meta().generation, report, &problems, pending);
        status.publications = publications;
        let old = rule.status.clone().unwrap_or_default();
        status::carry_transition_times(&old.conditions, &mut status.conditions, &now.to_string());
        if rule.status.as_ref() == Some(&status) && !input.verify_statuses {
            continue;
        }
        steps.push(Step::from(Op::Status {
            kind: Kind::TagRule,
            key,
            status: json!(status),
        }));
    }
    steps
}
