//! What a plan is made of: the outputs and other objects laneway writes, the steps and phases
//! of a namespace's plan, and what each write did.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::events::EventType;

use crate::api::{LaneEntryStatus, LaneRouteStatus, TagRuleStatus};
use crate::gateway::HttpRoute;
use crate::lanes::naming::content_hash;
use crate::lanes::{Kind, ObjectKey};
use crate::leader::Fenced;

/// The kinds of output laneway writes, in the order plans list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OutputKind {
    Service,
    EndpointSlice,
    HttpRoute,
}

impl From<OutputKind> for Kind {
    fn from(kind: OutputKind) -> Kind {
        match kind {
            OutputKind::Service => Kind::Service,
            OutputKind::EndpointSlice => Kind::EndpointSlice,
            OutputKind::HttpRoute => Kind::HttpRoute,
        }
    }
}

impl std::fmt::Display for OutputKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Kind::from(*self).fmt(f)
    }
}

/// laneway's own kinds: the objects that carry its finalizer and whose status it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnKind {
    LaneRoute,
    TagRule,
    LaneEntry,
}

impl From<OwnKind> for Kind {
    fn from(kind: OwnKind) -> Kind {
        match kind {
            OwnKind::LaneRoute => Kind::LaneRoute,
            OwnKind::TagRule => Kind::TagRule,
            OwnKind::LaneEntry => Kind::LaneEntry,
        }
    }
}

/// One output object (a Service, an EndpointSlice or an HTTPRoute), by kind and key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub kind: OutputKind,
    pub key: ObjectKey,
}

impl Target {
    /// The HTTPRoute `name` of namespace `ns`.
    pub fn route(ns: &str, name: &str) -> Self {
        Target {
            kind: OutputKind::HttpRoute,
            key: ObjectKey::new(ns, name),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.key)
    }
}

/// An output object to apply.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Service(Arc<Service>),
    Slice(Arc<EndpointSlice>),
    Route(Arc<HttpRoute>),
}

impl Output {
    pub fn target(&self) -> Target {
        let (kind, meta) = match self {
            Output::Service(s) => (OutputKind::Service, &s.metadata),
            Output::Slice(s) => (OutputKind::EndpointSlice, &s.metadata),
            Output::Route(r) => (OutputKind::HttpRoute, &r.metadata),
        };
        Target {
            kind,
            key: ObjectKey::new(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ),
        }
    }
}

/// What laneway's watches show of an output it is about to write, which decides how it is
/// written: creating an object, or replacing it at a known version, costs the API server less
/// than a server-side apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Not there: created.
    Absent,
    /// There with laneway's content at this `resourceVersion`: replaced at that version.
    At(String),
    /// Server-side applied (routes).
    Unsure,
}

/// One write.
#[derive(Clone, Debug)]
pub enum Op {
    /// An output, stamped with the hash of its content: created or replaced as `known` says
    /// (at the version a read gives where the object is not as `known` says), server-side
    /// applied where nothing is known.
    Apply {
        output: Output,
        hash: String,
        known: Known,
    },
    Delete(Target),
    /// The status of a laneway object, replaced whole at `version` (the `resourceVersion` it
    /// was made from), or at the object's version now where there is none or it changed since.
    /// A replace costs the API server less than a server-side apply.
    Status {
        key: ObjectKey,
        status: Status,
        version: Option<String>,
    },
    /// Adds or removes laneway's finalizer.
    Finalizer {
        kind: OwnKind,
        key: ObjectKey,
        present: bool,
    },
    Event {
        reference: ObjectReference,
        type_: EventType,
        reason: String,
        note: String,
    },
    /// Routes a LaneEntry would have with lane `lane` alone (`None`: no lane), tried with a
    /// server-side dry run: nothing is written, the API server says whether it would take them.
    Probe {
        entry: ObjectKey,
        lane: Option<String>,
        routes: Vec<HttpRoute>,
    },
}

/// The status of one of laneway's own objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    LaneRoute(LaneRouteStatus),
    TagRule(TagRuleStatus),
    LaneEntry(LaneEntryStatus),
}

impl Status {
    pub fn kind(&self) -> OwnKind {
        match self {
            Status::LaneRoute(_) => OwnKind::LaneRoute,
            Status::TagRule(_) => OwnKind::TagRule,
            Status::LaneEntry(_) => OwnKind::LaneEntry,
        }
    }

    /// The hash of the status as the object carries it.
    pub fn content_hash(&self) -> String {
        match self {
            Status::LaneRoute(s) => content_hash(s),
            Status::TagRule(s) => content_hash(s),
            Status::LaneEntry(s) => content_hash(s),
        }
    }
}

/// What a step is about, for its outcome.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    Output(Target),
    Status(OwnKind, ObjectKey),
    Finalizer(OwnKind, ObjectKey),
    Event,
    /// A dry run of a LaneEntry's routes with one lane alone (or none).
    Probe(ObjectKey, Option<String>),
}

impl Op {
    pub fn subject(&self) -> Subject {
        match self {
            Op::Apply { output, .. } => Subject::Output(output.target()),
            Op::Delete(t) => Subject::Output(t.clone()),
            Op::Status { status, key, .. } => Subject::Status(status.kind(), key.clone()),
            Op::Finalizer { kind, key, .. } => Subject::Finalizer(*kind, key.clone()),
            Op::Event { .. } => Subject::Event,
            Op::Probe { entry, lane, .. } => Subject::Probe(entry.clone(), lane.clone()),
        }
    }
}

/// A write and what must have been written before it.
#[derive(Clone, Debug)]
pub struct Step {
    pub op: Op,
    pub needs: Vec<Subject>,
}

impl From<Op> for Step {
    fn from(op: Op) -> Self {
        Step {
            op,
            needs: Vec::new(),
        }
    }
}

/// The writes for one namespace, in phases: each phase starts when the one before it has ended.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub namespace: String,
    pub phases: Vec<Vec<Step>>,
    /// Phases run after `phases` have been reported (statuses, finalizers coming off, Events),
    /// while the namespace's next plan may already be under way; `None` for a plan made while
    /// an earlier tail was still running (it has none of its own).
    pub tail: Option<Vec<Vec<Step>>>,
}

impl Plan {
    pub fn new(namespace: &str) -> Self {
        Plan {
            namespace: namespace.to_owned(),
            phases: Vec::new(),
            tail: Some(Vec::new()),
        }
    }

    /// Adds a phase (an empty one is left out).
    pub fn phase(&mut self, steps: Vec<Step>) {
        if !steps.is_empty() {
            self.phases.push(steps);
        }
    }

    /// Adds a phase before the others (an empty one is left out).
    pub fn phase_first(&mut self, steps: Vec<Step>) {
        if !steps.is_empty() {
            self.phases.insert(0, steps);
        }
    }

    /// Adds a phase to the tail.
    pub fn tail_phase(&mut self, steps: Vec<Step>) {
        if let Some(tail) = self.tail.as_mut().filter(|_| !steps.is_empty()) {
            tail.push(steps);
        }
    }

    fn all(&self) -> impl Iterator<Item = &Vec<Step>> {
        self.phases.iter().chain(self.tail.iter().flatten())
    }

    pub fn is_empty(&self) -> bool {
        self.all().next().is_none()
    }

    pub fn len(&self) -> usize {
        self.all().map(Vec::len).sum()
    }
}

/// The least a throttled write waits: what the API server's Priority and Fairness and its
/// max-in-flight limit ask for at least, used when a 429 carries no `Retry-After`.
pub const THROTTLED_FLOOR: Duration = Duration::from_secs(1);

/// Why a write failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("not written: this replica does not hold the lease")]
    NotLeader,
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The API server refused the write.
    #[error("{message}")]
    Rejected { code: u16, message: String },
    /// The API server is throttling this client (429): nothing is sent again before
    /// `retry_after`.
    #[error("{message} (retry after {retry_after:?})")]
    Throttled { retry_after: Duration, message: String },
    #[error("{0}")]
    Failed(String),
    #[error("not written: {0} could not be written first")]
    Skipped(String),
}

impl WriteError {
    /// Worth retrying as it is (the object itself is not at fault).
    pub fn is_transient(&self) -> bool {
        match self {
            WriteError::Rejected { code, .. } => *code == 409 || *code >= 500,
            _ => true,
        }
    }

    /// How long the API server asked for before anything is sent again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            WriteError::Throttled { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The server refused to change a field that cannot change once set.
    pub(super) fn is_immutable(&self) -> bool {
        matches!(self, WriteError::Rejected { code: 422, message }
            if message.contains("immutable") || message.contains("may not change once set"))
    }
}

impl From<kube::Error> for WriteError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) if status.code == 429 => {
                let seconds = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
                WriteError::Throttled {
                    retry_after: Duration::from_secs(seconds.into()).max(THROTTLED_FLOOR),
                    message: status.message,
                }
            }
            kube::Error::Api(status) => WriteError::Rejected {
                code: status.code,
                message: status.message,
            },
            other => WriteError::Failed(other.to_string()),
        }
    }
}

impl From<Fenced<kube::Error>> for WriteError {
    fn from(e: Fenced<kube::Error>) -> Self {
        match e {
            Fenced::NotLeader => WriteError::NotLeader,
            Fenced::TimedOut(d) => WriteError::TimedOut(d),
            Fenced::Failed(e) => e.into(),
        }
    }
}

/// What a step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Written with this content hash, now at `version`.
    Applied {
        hash: String,
        version: Option<String>,
    },
    /// The object had to be deleted and created again (a field that cannot change changed).
    Recreated {
        hash: String,
        version: Option<String>,
        reason: String,
    },
    Deleted,
    Written,
}

/// Outcome of a plan: per step, what was done or why not.
#[derive(Debug, Default)]
pub struct Report {
    pub namespace: String,
    /// The results of a plan's tail, not of its first phases.
    pub tail: bool,
    pub results: Vec<(Subject, Result<Done, WriteError>)>,
}
