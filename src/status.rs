//! Status of LaneRoutes and TagRules from what the core resolved: conditions a user can act on.

use crate::api::{
    Condition, ConditionStatus, ConditionType, EntryMode, EntryRouteStatus, LaneEntryStatus, LaneRouteStatus,
    Reason, ServiceLaneStatus, SubsetSource, TagRuleStatus,
};
use crate::lanes::{EntryReport, Problem, RouteReport, TagRuleReport};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

// The condition types, by the names the functions below have always used for them.
// Reconciling: true while laneway is still working toward the spec (kstatus and Argo CD: in
// progress). Stalled: true when laneway cannot make progress until the user changes something
// (kstatus: failed). Routed: whether a LaneEntry lets requests into the lane (so that `match`
// and `weight` take effect).
const READY: ConditionType = ConditionType::Ready;
const FALLBACK_ACTIVE: ConditionType = ConditionType::FallbackActive;
const DEGRADED: ConditionType = ConditionType::Degraded;
const RECONCILING: ConditionType = ConditionType::Reconciling;
const STALLED: ConditionType = ConditionType::Stalled;
const ROUTED: ConditionType = ConditionType::Routed;

/// Problems that only the user can resolve.
fn stalls(p: &Problem) -> bool {
    matches!(
        p,
        Problem::DuplicateLane { .. }
            | Problem::InvalidSelector { .. }
            | Problem::NameTaken { .. }
            | Problem::WriteRejected { .. }
            | Problem::LaneRefused { .. }
            | Problem::FallbackCycle { .. }
            | Problem::ServiceWithoutSelector { .. }
            | Problem::DuplicateApplication { .. }
            | Problem::DuplicateNacosService { .. }
            | Problem::NacosNotConfigured { .. }
            | Problem::EntryBackend { .. }
            | Problem::EntryMatch { .. }
            | Problem::LaneHeaderInMatch { .. }
            | Problem::DuplicateLaneMatch { .. }
            | Problem::HostnameConflict { .. }
            | Problem::InvalidGuard { .. }
    )
}

/// `Stalled` and `Reconciling` from the problems and what is still under way (`pending`:
/// reason and message). Never both true, and `Stalled` first: kstatus reads whichever of the
/// two comes first.
fn progress(problems: &[&Problem], pending: Option<(Reason, String)>) -> [Condition; 2] {
    let stalled: Vec<String> = problems
        .iter()
        .filter(|p| stalls(p))
        .map(|p| p.to_string())
        .collect();
    let stalled = match problems.iter().find(|p| stalls(p)) {
        Some(first) => Condition::new(STALLED, true, first.reason(), summarize(&stalled)),
        None => Condition::new(STALLED, false, Reason::Progressing, ""),
    };
    let reconciling = match pending {
        Some((reason, message)) if stalled.status == ConditionStatus::False => {
            Condition::new(RECONCILING, true, reason, message)
        }
        _ => Condition::new(RECONCILING, false, Reason::Reconciled, ""),
    };
    [stalled, reconciling]
}

/// The status of a LaneRoute. `problems` are those whose subjects include the route;
/// `retrying` describes a write of its outputs that failed and is being retried.
pub fn lane_route_status(
    generation: Option<i64>,
    report: &RouteReport,
    problems: &[&Problem],
    retrying: Option<String>,
) -> LaneRouteStatus {
    let services = report.services.clone();
    let falling_back: Vec<String> = services
        .iter()
        .filter(|s| s.source.is_fallback())
        .map(|s| format!("{} from {}", s.name, s.source))
        .collect();
    let fallback = if falling_back.is_empty() {
        Condition::new(
            FALLBACK_ACTIVE,
            false,
            Reason::AllInLane,
            "every service is served by the lane itself",
        )
    } else {
        Condition::new(
            FALLBACK_ACTIVE,
            true,
            Reason::FallingBack,
            summarize_with(&falling_back, ", "),
        )
    };
    let [mut stalled, mut reconciling] = progress(problems, pending(problems, retrying));
    if report.expired && stalled.status == ConditionStatus::False {
        // Only a longer ttl or a new LaneRoute brings the lane back.
        stalled = Condition::new(
            STALLED,
            true,
            Reason::Expired,
            "the lane's ttl has passed; extend spec.ttl or delete the LaneRoute",
        );
        reconciling = Condition::new(RECONCILING, false, Reason::Reconciled, "");
    }
    let ready = unless_stalled(ready(report), &stalled);
    let mut conditions = vec![
        stalled,
        reconciling,
        ready,
        fallback,
        routed(report, problems),
        degraded(problems),
    ];
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    let mut status = LaneRouteStatus {
        observed_generation: generation,
        lane: Some(report.lane.clone()),
        conditions,
        service_count: services.len() as i32,
        fallback_count: falling_back.len() as i32,
        services,
        expires_at: report.expires_at.map(|t| t.to_string()),
    };
    within_budget(&mut status);
    status
}

/// The most a LaneRoute's status may take, serialized as JSON: etcd refuses a request of more
/// than 1.5 MiB, and the object also holds its spec (up to every service named again) and the
/// managed fields, which track each service of the status once more.
pub const STATUS_BUDGET: usize = 256 * 1024;

fn json_size<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

/// Room kept for the condition that says the services were cut.
const TRUNCATION_NOTE: usize = 512;

/// Cuts `status.services` to as many as fit in [`STATUS_BUDGET`] (`serviceCount` and
/// `fallbackCount` still count them all), and says so in `Degraded`.
fn within_budget(status: &mut LaneRouteStatus) {
    if json_size(status) <= STATUS_BUDGET {
        return;
    }
    let services = std::mem::take(&mut status.services);
    let mut used = json_size(status) + TRUNCATION_NOTE;
    let kept = services
        .iter()
        .take_while(|s| {
            used += json_size(s) + 1;
            used <= STATUS_BUDGET
        })
        .count();
    let note = format!(
        "status.services lists {kept} of {} services, as many as fit in the status size budget ({STATUS_BUDGET} bytes); serviceCount and fallbackCount count them all",
        services.len()
    );
    status.services = services;
    status.services.truncate(kept);
    if let Some(d) = status.conditions.iter_mut().find(|c| c.type_ == DEGRADED) {
        if d.status == ConditionStatus::True {
            d.message = format!("{}; {note}", d.message);
        } else {
            *d = Condition {
                observed_generation: d.observed_generation,
                ..Condition::new(DEGRADED, true, Reason::StatusTruncated, note)
            };
        }
    }
}

/// `ready`, unless the object is stalled: what only the user can fix keeps it from being ready,
/// whatever else went through.
fn unless_stalled(ready: Condition, stalled: &Condition) -> Condition {
    if ready.status == ConditionStatus::True && stalled.status == ConditionStatus::True {
        Condition {
            type_: READY,
            status: ConditionStatus::False,
            ..stalled.clone()
        }
    } else {
        ready
    }
}

/// A LaneRoute's Ready: expired, a duplicate lane, a service without a ready instance in any
/// tier (an outage), or resolved. A strict lane's service without instances of its own answers
/// 503 by design: resolved, and said so.
fn ready(report: &RouteReport) -> Condition {
    let (by_design, empty): (Vec<_>, Vec<_>) = report
        .services
        .iter()
        .filter(|s| s.source == SubsetSource::Empty || s.served_by.is_none())
        .partition(|s| report.strict && s.served_by.is_some());
    let names = |services: &[&ServiceLaneStatus]| {
        let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
        summarize_with(&names, ", ")
    };
    if report.expired {
        Condition::new(
            READY,
            false,
            Reason::Expired,
            "the lane's ttl has passed; its Services and EndpointSlices were removed",
        )
    } else if report.ignored {
        Condition::new(
            READY,
            false,
            Reason::DuplicateLane,
            "another LaneRoute declares this lane",
        )
    } else if !empty.is_empty() {
        Condition::new(
            READY,
            false,
            Reason::EmptySubset,
            format!(
                "no ready instance in the lane, its fallbacks or baseline for: {}",
                names(&empty)
            ),
        )
    } else if !by_design.is_empty() {
        Condition::new(
            READY,
            true,
            Reason::Resolved,
            format!(
                "{} services resolved; strict, without instances of its own (answered 503): {}",
                report.services.len(),
                names(&by_design)
            ),
        )
    } else {
        Condition::new(
            READY,
            true,
            Reason::Resolved,
            format!("{} services resolved", report.services.len()),
        )
    }
}

/// Why a LaneRoute is still being worked on, if it is: a write being retried, or Services it
/// names that do not exist yet.
fn pending(problems: &[&Problem], retrying: Option<String>) -> Option<(Reason, String)> {
    let waiting: Vec<String> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::UnknownService { service, .. } => Some(service.clone()),
            _ => None,
        })
        .collect();
    match retrying {
        Some(message) => Some((Reason::Retrying, message)),
        None if !waiting.is_empty() => Some((
            Reason::WaitingForService,
            format!("waiting for Service(s) {} to exist", waiting.join(", ")),
        )),
        None => None,
    }
}

/// A LaneRoute's Routed: the LaneEntries that let requests into its lane, or none (and why,
/// when the API server refused the lane's routes).
fn routed(report: &RouteReport, problems: &[&Problem]) -> Condition {
    let refused = problems.iter().find(|p| matches!(p, Problem::LaneRefused { .. }));
    if let (true, Some(p)) = (report.entries.is_empty(), refused) {
        Condition::new(ROUTED, false, p.reason(), p.to_string())
    } else if report.entries.is_empty() {
        let message = if report.has_match_or_weight {
            format!(
                "no LaneEntry lets requests into lane {:?}: spec.match and spec.weight have no effect at a gateway",
                report.lane
            )
        } else {
            format!("no LaneEntry lets HTTP requests into lane {:?}", report.lane)
        };
        Condition::new(ROUTED, false, Reason::NoLaneEntry, message)
    } else {
        Condition::new(
            ROUTED,
            true,
            Reason::Routed,
            format!("LaneEntry {}", report.entries.join(", ")),
        )
    }
}

/// `Routed=True` only while a gateway accepted the routes of one of the LaneEntries (`entries`)
/// that let requests into the lane: with none of them `accepted` yet, the condition says which
/// wait for their gateway.
pub fn routed_only_where_accepted(status: &mut LaneRouteStatus, entries: &[String], accepted: &[String]) {
    let Some(routed) = status.conditions.iter_mut().find(|c| c.type_ == ROUTED) else {
        return;
    };
    if routed.status != ConditionStatus::True || !accepted.is_empty() {
        return;
    }
    let generation = routed.observed_generation;
    *routed = Condition::new(
        ROUTED,
        false,
        Reason::WaitingForGateway,
        format!(
            "no gateway has accepted the routes of LaneEntry {} yet",
            entries.join(", ")
        ),
    );
    routed.observed_generation = generation;
}

/// The status of a TagRule (without publications, which the publishers fill in);
/// `publishing` describes a rule not yet in every config centre.
pub fn tag_rule_status(
    generation: Option<i64>,
    report: &TagRuleReport,
    problems: &[&Problem],
    publishing: Option<(Reason, String)>,
) -> TagRuleStatus {
    let blocking = problems.iter().find(|p| {
        matches!(
            p,
            Problem::InvalidSelector { .. } | Problem::DuplicateApplication { .. }
        )
    });
    let ready = match blocking {
        Some(p) => Condition::new(READY, false, p.reason(), p.to_string()),
        None => Condition::new(
            READY,
            true,
            Reason::Resolved,
            format!("{} pods tagged", report.tagged_pods),
        ),
    };
    let [stalled, reconciling] = progress(problems, publishing);
    let mut conditions = vec![stalled, reconciling, ready, degraded(problems)];
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    TagRuleStatus {
        observed_generation: generation,
        conditions,
        tag_count: report.tags.len() as i32,
        tagged_pods: report.tagged_pods,
        tags: report.tags.clone(),
        publications: Vec::new(),
    }
}

/// Longest condition message: a status stays small whatever the number of problems.
const MAX_MESSAGE: usize = 4096;

/// The messages joined by `; `, as many as fit in [`MAX_MESSAGE`], then how many more there are.
fn summarize(messages: &[String]) -> String {
    summarize_with(messages, "; ")
}

/// The messages joined by `separator`, as many as fit in [`MAX_MESSAGE`], then how many more
/// there are.
fn summarize_with(messages: &[String], separator: &str) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let sep = if out.is_empty() { "" } else { separator };
        if out.len() + sep.len() + m.len() > MAX_MESSAGE {
            let rest = messages.len() - i;
            if out.is_empty() {
                let mut end = MAX_MESSAGE.min(m.len());
                while !m.is_char_boundary(end) {
                    end -= 1;
                }
                out.push_str(&m[..end]);
                out.push('…');
                if rest > 1 {
                    out.push_str(&format!(" (and {} more)", rest - 1));
                }
            } else {
                out.push_str(&format!("{separator}and {rest} more"));
            }
            return out;
        }
        out.push_str(sep);
        out.push_str(m);
    }
    out
}

/// What the controller knows of a LaneEntry's routes beyond the core.
pub struct EntryFacts {
    /// The API server does not serve HTTPRoutes.
    pub api_missing: bool,
    /// The routes and, per parent, the gateway controller's verdict.
    pub routes: Vec<EntryRouteStatus>,
    /// Parents whose gateway class says it cannot set a header from a backendRef's filters
    /// (when the entry has weighted lanes).
    pub filters_unsupported: Vec<String>,
    /// Writes of the entry's outputs being retried.
    pub retrying: Option<String>,
}

/// The status of a LaneEntry: like [`lane_route_status`], its conditions one after another.
pub fn lane_entry_status(
    generation: Option<i64>,
    report: &EntryReport,
    problems: &[&Problem],
    facts: EntryFacts,
) -> LaneEntryStatus {
    let edge = report.mode == EntryMode::Edge;
    let unanswered = edge && !facts.routes.is_empty() && facts.routes.iter().any(|r| r.parents.is_empty());
    let ready = entry_ready(report.mode, &facts, unanswered);
    let pending = match (facts.api_missing, facts.retrying, unanswered) {
        (true, _, _) => Some((
            Reason::WaitingForGatewayAPI,
            "waiting for the Gateway API CRDs to be installed".to_owned(),
        )),
        (_, Some(message), _) => Some((Reason::Retrying, message)),
        (_, None, true) => Some((
            Reason::WaitingForGateway,
            "waiting for the gateway's controller".to_owned(),
        )),
        _ => None,
    };
    let mut degraded = degraded(problems);
    if !facts.filters_unsupported.is_empty() && degraded.status == ConditionStatus::False {
        degraded = Condition::new(
            DEGRADED,
            true,
            Reason::BackendFiltersUnsupported,
            format!(
                "the gateway of {} does not set headers from a backendRef's filters: requests sent into a lane by weight reach the lane's first Service but not the lane header, so later hops serve them from baseline",
                facts.filters_unsupported.join(", ")
            ),
        );
    }
    // A lane left out of the entry's routes stalls its LaneRoute; the entry still serves the
    // rest, so it is degraded.
    let stalling: Vec<&Problem> = problems
        .iter()
        .copied()
        .filter(|p| !matches!(p, Problem::LaneRefused { .. }))
        .collect();
    let [stalled, reconciling] = progress(&stalling, pending);
    let ready = unless_stalled(ready, &stalled);
    let mut conditions = vec![stalled, reconciling, ready, degraded];
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    LaneEntryStatus {
        observed_generation: generation,
        mode: Some(report.mode),
        conditions,
        route_count: facts.routes.len() as i32,
        routes: facts.routes,
        lane_count: report.lanes.len() as i32,
        lanes: report.lanes.clone(),
        baseline_weight: report.baseline_weight,
    }
}

/// A LaneEntry's Ready condition: the Gateway API is there and every gateway accepted its
/// routes.
fn entry_ready(mode: EntryMode, facts: &EntryFacts, unanswered: bool) -> Condition {
    let parents: Vec<_> = facts.routes.iter().flat_map(|r| r.parents.iter()).collect();
    let refused: Vec<String> = parents
        .iter()
        .filter(|p| [p.accepted, p.resolved_refs].contains(&Some(ConditionStatus::False)))
        .map(|p| format!("{}: {}", p.parent, p.message.clone().unwrap_or_default()))
        .collect();
    if facts.api_missing {
        Condition::new(
            READY,
            false,
            Reason::GatewayAPIMissing,
            "the Gateway API CRDs (gateway.networking.k8s.io/v1 HTTPRoute) are not installed",
        )
    } else if !refused.is_empty() {
        Condition::new(READY, false, Reason::NotAccepted, refused.join("; "))
    } else if unanswered {
        Condition::new(
            READY,
            false,
            Reason::WaitingForGateway,
            "no gateway controller has reported on the routes yet",
        )
    } else if mode == EntryMode::Mesh && parents.is_empty() {
        Condition::new(
            READY,
            true,
            Reason::Written,
            "routes written; no mesh controller reports on them (none may run here)",
        )
    } else {
        Condition::new(
            READY,
            true,
            Reason::Accepted,
            format!("{} routes accepted", facts.routes.len()),
        )
    }
}

fn degraded(problems: &[&Problem]) -> Condition {
    match problems.first() {
        None => Condition::new(DEGRADED, false, Reason::NoProblems, ""),
        Some(first) => {
            let messages: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            Condition::new(DEGRADED, true, first.reason(), summarize(&messages))
        }
    }
}

/// Keeps each condition's `lastTransitionTime` while its status is unchanged, and stamps
/// `now` on the ones that changed.
pub fn carry_transition_times(old: &[Condition], new: &mut [Condition], now: Timestamp) {
    for c in new {
        c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
            Some(o) if o.status == c.status => o.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
        if c.status == ConditionStatus::Unknown {
            c.last_transition_time.get_or_insert(Time(now));
        }
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
