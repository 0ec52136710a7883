//! What the lanes page shows, built from the LaneRoutes' and LaneEntries' statuses alone: the
//! page tells what laneway reported, never a second opinion of its own.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{Condition, ConditionStatus, ConditionType, LaneEntry, LaneRoute, SubsetSource};
use crate::probe::LastProbe;

/// Every namespace that has a LaneRoute, by name.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct View {
    pub namespaces: Vec<NamespaceView>,
}

/// The lanes × services matrix of one namespace.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct NamespaceView {
    pub name: String,
    /// The columns: every service some lane of the namespace lists, sorted.
    pub services: Vec<String>,
    /// The rows, by lane name.
    pub lanes: Vec<LaneView>,
}

/// One lane (one LaneRoute).
#[derive(Serialize, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LaneView {
    pub lane: String,
    /// The LaneRoute's name.
    pub route: String,
    /// Per service of the lane: the subset laneway resolved.
    pub cells: BTreeMap<String, Cell>,
    /// Time left before the lane expires (`3h12m`), `expired`, or none without a `ttl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_left: Option<String>,
    /// Conditions that need a look: `Ready`/`Routed` not `True`, `Degraded`/`Stalled` `True`.
    pub problems: Vec<String>,
    /// Where a browser enters the lane: each LaneEntry's lane link (`http://host/?lane=x`) and
    /// preview hostnames.
    pub links: Vec<String>,
    /// True until laneway has written a status for this LaneRoute's generation.
    pub pending: bool,
    /// The last `kubectl laneway probe` of this lane run on this machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe: Option<ProbeCell>,
}

/// What the page shows of a lane's last probe.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct ProbeCell {
    /// When it ran (RFC 3339).
    pub at: String,
    pub clean: bool,
    /// The sentence naming the first hop that lost the lane, or saying the chain is clean.
    pub summary: String,
}

/// Puts each lane's last probe, as `read(namespace, lane)` finds it, into `view`.
pub fn with_last_probes(view: &mut View, read: impl Fn(&str, &str) -> Option<LastProbe>) {
    for ns in &mut view.namespaces {
        for lane in &mut ns.lanes {
            lane.last_probe = read(&ns.name, &lane.lane).map(|p| ProbeCell {
                clean: p.verdict.is_clean(),
                at: p.at,
                summary: p.summary,
            });
        }
    }
}

/// One lane at one service.
#[derive(Serialize, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cell {
    /// `Lane`, `Fallback`, `Baseline` or `Empty`.
    pub source: &'static str,
    /// The lane that serves it, for a fallback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The Service that serves the lane here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// Ready endpoints of the lane's own pods here, while the lane serves itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<i32>,
}

/// The page's content at `now`.
pub fn view(routes: &[LaneRoute], entries: &[LaneEntry], now: Timestamp) -> View {
    let mut by_ns: BTreeMap<String, Vec<&LaneRoute>> = BTreeMap::new();
    for route in routes {
        by_ns
            .entry(route.namespace().unwrap_or_default())
            .or_default()
            .push(route);
    }
    let namespaces = by_ns
        .into_iter()
        .map(|(ns, routes)| {
            let entries: Vec<&LaneEntry> = entries
                .iter()
                .filter(|e| e.namespace().as_deref() == Some(ns.as_str()))
                .collect();
            let mut lanes: Vec<LaneView> = routes.iter().map(|r| lane(r, &entries, now)).collect();
            lanes.sort_by(|a, b| (&a.lane, &a.route).cmp(&(&b.lane, &b.route)));
            let services: BTreeSet<String> = lanes.iter().flat_map(|l| l.cells.keys().cloned()).collect();
            NamespaceView {
                name: ns,
                services: services.into_iter().collect(),
                lanes,
            }
        })
        .collect();
    View { namespaces }
}

fn lane(route: &LaneRoute, entries: &[&LaneEntry], now: Timestamp) -> LaneView {
    let status = route.status.clone().unwrap_or_default();
    let name = status
        .lane
        .clone()
        .or_else(|| route.spec.lane.clone())
        .unwrap_or_else(|| route.name_any());
    let cells = status
        .services
        .iter()
        .map(|s| {
            let (source, fallback) = match &s.source {
                SubsetSource::Lane => ("Lane", None),
                SubsetSource::Fallback(lane) => ("Fallback", Some(lane.clone())),
                SubsetSource::Baseline => ("Baseline", None),
                SubsetSource::Empty => ("Empty", None),
            };
            let cell = Cell {
                source,
                fallback,
                served_by: s.served_by.clone(),
                ready: s.endpoints,
            };
            (s.name.clone(), cell)
        })
        .collect();
    LaneView {
        links: links(&name, entries),
        ttl_left: status.expires_at.as_deref().map(|at| ttl_left(at, now)),
        problems: status.conditions.iter().filter_map(problem).collect(),
        pending: status.observed_generation.is_none()
            || status.observed_generation < route.metadata.generation,
        route: route.name_any(),
        lane: name,
        cells,
        last_probe: None,
    }
}

/// `Degraded: HostnameConflict: …` for a condition that needs a look.
fn problem(c: &Condition) -> Option<String> {
    let wrong = match c.type_ {
        ConditionType::Ready | ConditionType::Routed => c.status != ConditionStatus::True,
        ConditionType::Degraded | ConditionType::Stalled => c.status == ConditionStatus::True,
        ConditionType::FallbackActive | ConditionType::Reconciling => false,
    };
    wrong.then(|| {
        let head = format!("{}={:?}: {}", c.type_.as_str(), c.status, c.reason);
        if c.message.is_empty() {
            head
        } else {
            format!("{head}: {}", c.message)
        }
    })
}

/// Each LaneEntry's link into `lane` at its first hostname without a wildcard, and the lane's
/// preview hostnames there.
fn links(lane: &str, entries: &[&LaneEntry]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in entries {
        let host = entry
            .spec
            .hostnames
            .iter()
            .flatten()
            .find(|h| !h.starts_with('*'));
        let status = entry
            .status
            .iter()
            .flat_map(|s| &s.lanes)
            .find(|l| l.lane == lane);
        let Some(status) = status else { continue };
        if let (Some(host), Some(link)) = (host, &status.link) {
            out.push(format!("http://{host}/{link}"));
        }
        out.extend(status.preview_hostnames.iter().map(|h| format!("http://{h}/")));
    }
    out.sort();
    out.dedup();
    out
}

/// Hours and minutes left until `expires_at` (RFC 3339), a started minute counting whole, or
/// `expired`.
fn ttl_left(expires_at: &str, now: Timestamp) -> String {
    let Ok(at) = expires_at.parse::<Timestamp>() else {
        return expires_at.to_owned();
    };
    if at <= now {
        return "expired".into();
    }
    let minutes = (at.as_second() - now.as_second() + 59) / 60;
    match (minutes / 60, minutes % 60) {
        (0, m) => format!("{m}m"),
        (h, 0) => format!("{h}h"),
        (h, m) => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn route(name: &str, lane: Option<&str>, status: serde_json::Value) -> LaneRoute {
        serde_json::from_value(json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
            "metadata": {"name": name, "namespace": "shop", "generation": 2},
            "spec": {"lane": lane, "services": ["cart", "web"]},
            "status": status,
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-12-06T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn each_service_of_a_lane_shows_its_source_ready_count_and_serving_service() {
        let alice = route(
            "alice",
            Some("dev-alice"),
            json!({"observedGeneration": 2, "lane": "dev-alice", "services": [
                {"name": "web", "source": "Lane", "endpoints": 2, "servedBy": "web-dev-alice"},
                {"name": "cart", "source": "Fallback:gray", "servedBy": "cart-gray"},
            ]}),
        );
        let gray = route(
            "gray",
            None,
            json!({"observedGeneration": 1, "lane": "gray", "services": [
                {"name": "cart", "source": "Baseline", "servedBy": "cart-baseline"},
                {"name": "pay", "source": "Empty"},
            ]}),
        );
        let v = view(&[gray, alice], &[], now());
        let ns = &v.namespaces[0];
        assert_eq!(ns.services, ["cart", "pay", "web"]);
        assert_eq!(
            ns.lanes.iter().map(|l| l.lane.as_str()).collect::<Vec<_>>(),
            ["dev-alice", "gray"]
        );
        let alice = &ns.lanes[0];
        assert_eq!(alice.cells["web"].source, "Lane");
        assert_eq!(alice.cells["web"].ready, Some(2));
        assert_eq!(alice.cells["cart"].source, "Fallback");
        assert_eq!(alice.cells["cart"].fallback.as_deref(), Some("gray"));
        assert_eq!(alice.cells["cart"].served_by.as_deref(), Some("cart-gray"));
        assert!(!alice.pending);
        let gray = &ns.lanes[1];
        assert_eq!(gray.cells["pay"].source, "Empty");
        assert!(!gray.cells.contains_key("web"));
        assert!(gray.pending, "generation 2 not observed yet");
    }

    #[test]
    fn unhealthy_conditions_ttl_and_links_are_shown() {
        let mut r = route(
            "gray",
            None,
            json!({"observedGeneration": 2, "lane": "gray", "expiresAt": "2026-12-06T13:04:30Z",
                   "conditions": [
                {"type": "Ready", "status": "False", "reason": "EmptySubset", "message": "pay has no pod"},
                {"type": "FallbackActive", "status": "True", "reason": "Fallback"},
                {"type": "Degraded", "status": "False", "reason": "AsExpected"},
                {"type": "Routed", "status": "True", "reason": "Routed"},
            ]}),
        );
        let entry: LaneEntry = serde_json::from_value(json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"hostnames": ["*.shop.test", "shop.test"], "service": "web"},
            "status": {"lanes": [
                {"lane": "gray", "headers": ["x-lane: gray"], "link": "?lane=gray",
                 "previewHostnames": ["gray.shop.test"]},
                {"lane": "other", "headers": [], "link": "?lane=other"},
            ]},
        }))
        .unwrap();
        let l = &view(std::slice::from_ref(&r), std::slice::from_ref(&entry), now()).namespaces[0].lanes[0];
        assert_eq!(l.problems, ["Ready=False: EmptySubset: pay has no pod"]);
        assert_eq!(l.ttl_left.as_deref(), Some("3h5m"));
        assert_eq!(l.links, ["http://gray.shop.test/", "http://shop.test/?lane=gray"]);

        r.status.as_mut().unwrap().expires_at = Some("2026-12-06T09:00:00Z".into());
        let l = &view(&[r], &[], now()).namespaces[0].lanes[0];
        assert_eq!(l.ttl_left.as_deref(), Some("expired"));
        assert!(l.links.is_empty(), "no LaneEntry, no link");
    }

    #[test]
    fn each_lane_shows_its_last_probe_where_one_was_saved() {
        let r = route("gray", None, json!({"observedGeneration": 2, "lane": "gray"}));
        let mut v = view(&[r, route("alice", Some("dev-alice"), json!({}))], &[], now());
        let cart = crate::probe::Expected {
            service: "cart".into(),
            source: Some(SubsetSource::Lane),
        };
        let verdict = crate::probe::judge("gray", &[cart], Vec::new());
        with_last_probes(&mut v, |ns, lane| {
            (ns == "shop" && lane == "gray").then(|| LastProbe {
                at: "2026-12-06T09:58:00Z".into(),
                entry: "LaneEntry shop/web".into(),
                summary: "lane gray never reached cart: no hop reported".into(),
                verdict: verdict.clone(),
            })
        });
        let lanes = &v.namespaces[0].lanes;
        assert_eq!(lanes[0].lane, "dev-alice");
        assert_eq!(lanes[0].last_probe, None);
        assert_eq!(
            lanes[1].last_probe,
            Some(ProbeCell {
                at: "2026-12-06T09:58:00Z".into(),
                clean: false,
                summary: "lane gray never reached cart: no hop reported".into(),
            })
        );
    }
}
