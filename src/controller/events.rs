//! Kubernetes Events: a Warning when a problem first appears, told once. Like the built-in
//! EndpointSlice controller, laneway sends none for routine endpoint changes: a lane moving
//! between its own pods, a fallback and baseline is in the LaneRoute's status (each service's
//! source and `FallbackActive`), and an outage (`EmptySubset`) is a problem.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use kube::Resource;

use crate::api::Reason;
use crate::lanes::{Index, Kind, ObjectKey, Problem};
use crate::writer::Op;

/// What one namespace has already been told.
#[derive(Debug, Default)]
pub(super) struct Told {
    problems: BTreeSet<(Kind, ObjectKey, String)>,
    /// The problems `problems` was last taken from.
    last: Vec<Problem>,
}

/// What a Warning Event says: its reason and note.
pub(super) struct Notice {
    reason: Reason,
    note: String,
}

impl Notice {
    pub fn warning(reason: Reason, note: String) -> Self {
        Notice { reason, note }
    }

    /// The Event about a LaneRoute, LaneEntry, TagRule or user Service that still exists.
    pub fn about(self, index: &Index, kind: Kind, key: &ObjectKey) -> Option<Op> {
        let reference = match kind {
            Kind::LaneRoute => index.lane_route(&key.namespace, &key.name)?.object_ref(&()),
            Kind::TagRule => index.tag_rule(&key.namespace, &key.name)?.object_ref(&()),
            Kind::LaneEntry => index.lane_entry(&key.namespace, &key.name)?.object_ref(&()),
            Kind::Service => {
                let svc = index.service(&key.namespace, &key.name)?;
                ObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: Some(kind.name().into_owned()),
                    namespace: Some(svc.namespace.clone()),
                    name: Some(svc.name.clone()),
                    uid: Some(svc.uid.clone()),
                    ..Default::default()
                }
            }
            // Problems are reported on laneway's own objects and user Services only.
            Kind::Pod
            | Kind::Deployment
            | Kind::EndpointSlice
            | Kind::HttpRoute
            | Kind::Gateway
            | Kind::GatewayClass => return None,
        };
        Some(self.on(reference))
    }

    /// The Event about the object `reference` names.
    pub fn on(self, reference: ObjectReference) -> Op {
        Op::Event {
            reference,
            type_: EventType::Warning,
            reason: self.reason.as_str().to_owned(),
            note: truncate(self.note, 1000),
        }
    }
}

/// At most this many problem Events per object and resolution: a flood of problems (every pod
/// of a large rule given two lanes, say) is summed up, not sent one by one.
const MAX_PER_OBJECT: usize = 5;

impl Told {
    /// Events for problems that newly appeared in `ns`.
    pub(super) fn tell<'a>(
        &mut self,
        index: &Index,
        ns: &str,
        problems: impl Iterator<Item = &'a Problem>,
    ) -> Vec<Op> {
        let problems: Vec<&Problem> = problems.collect();
        if problems.iter().copied().eq(self.last.iter()) {
            return Vec::new();
        }
        self.last = problems.iter().map(|p| (*p).clone()).collect();
        self.tell_problems(index, ns, problems)
    }

    /// Warnings for problems not told before; the problems told so far become `problems`.
    fn tell_problems(&mut self, index: &Index, ns: &str, problems: Vec<&Problem>) -> Vec<Op> {
        let mut current = BTreeSet::new();
        let mut events = Vec::new();
        let mut untold: BTreeMap<(Kind, ObjectKey), (usize, Reason)> = BTreeMap::new();
        for p in problems {
            let text = p.to_string();
            for (kind, key) in p.subjects().into_iter().filter(|(_, k)| k.namespace == ns) {
                let told = (kind, key.clone(), text.clone());
                if !self.problems.contains(&told) {
                    let count = untold.entry((kind, key.clone())).or_insert((0, p.reason()));
                    count.0 += 1;
                    if count.0 <= MAX_PER_OBJECT {
                        events.extend(Notice::warning(p.reason(), text.clone()).about(index, kind, &key));
                    }
                }
                current.insert(told);
            }
        }
        for ((kind, key), (count, reason)) in untold.into_iter().filter(|(_, (n, _))| *n > MAX_PER_OBJECT) {
            let note = format!(
                "and {} more problems; the Degraded condition lists them",
                count - MAX_PER_OBJECT
            );
            events.extend(Notice::warning(reason, note).about(index, kind, &key));
        }
        self.problems = current;
        events
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
