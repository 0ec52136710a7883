//! Claims on a gateway listener: the (hostname, path match) pairs each edge LaneEntry and
//! every other HTTPRoute serve, the preview hostnames of each entry's lanes, and which claim
//! keeps what two of them want.
//!
//! - An HTTPRoute that is not laneway's always keeps what it serves: laneway cannot withdraw it.
//! - Of two entries, the older claim keeps it: the one created first, then the first by
//!   namespace/name.
//! - Two claims contend for a hostname when they share a parent (a Gateway listener) and the
//!   hostname (Gateway API wildcards included; no hostnames is every hostname), and then in
//!   different namespaces when one's path match covers or equals the other's (`PathPrefix /`
//!   covers `Exact /checkout`), in one namespace only when the path matches are the same.
//! - A lane's preview hostname that equals a hostname another entry or HTTPRoute serves on a
//!   shared parent is always held by that one; of two entries giving a lane the same preview
//!   hostname, the older one keeps it.
//!
//! Pure: no client, no clock.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::entry::entry_lanes;
use super::links::preview_hostname;
use crate::api::LaneEntry;
use crate::lanes::index::{Index, Namespace};
use crate::lanes::model::{ParentKey, RouteInfo};
use crate::lanes::problem::{Kind, ObjectKey};
use crate::lanes::resolution::{lane_plan, LanePlan};

/// When a claim was made: an HTTPRoute that is not laneway's (`None`) comes before every entry,
/// entries by creation time, then namespace/name.
type Age = Option<(Option<Timestamp>, ObjectKey)>;

/// A path match as (type, value).
type PathMatch = (String, String);

/// What one entry or HTTPRoute serves on its parents.
struct Claim {
    holder: (Kind, ObjectKey),
    age: Age,
    parents: Vec<ParentKey>,
    /// Lower-case; none: every hostname.
    hostnames: Vec<String>,
    paths: Vec<PathMatch>,
    /// The preview hostnames of the entry's lanes, lower-case.
    previews: Vec<String>,
}

/// A hostname of an entry that an older claim holds.
#[derive(Debug, PartialEq)]
pub(super) struct Contested {
    /// The entry's hostname; `None` for an entry without hostnames (every hostname).
    pub hostname: Option<String>,
    pub holder: (Kind, ObjectKey),
    /// The path match the two contend for, as `type value`.
    pub path: String,
}

/// Every claim on every gateway listener.
pub(super) struct Claims {
    claims: Vec<Claim>,
}

impl Claims {
    /// The claims of the edge entries of every namespace (the lanes of `namespace` from `plan`,
    /// of the others as at `now`, when an entry of `namespace` has preview hostnames) and of
    /// every HTTPRoute that is not laneway's.
    pub fn of(index: &Index, namespace: &str, plan: &LanePlan, now: Timestamp) -> Claims {
        let mut claims: Vec<Claim> = index
            .all_http_routes()
            .filter(|r| !r.ours)
            .map(route_claim)
            .collect();
        let previewing = index
            .ns(namespace)
            .is_some_and(|n| n.entries.values().any(has_previews));
        let mut plans: BTreeMap<&str, LanePlan> = BTreeMap::new();
        for (ns_name, ns) in &index.namespaces {
            for entry in ns.entries.values().filter(|e| e.spec.mesh.is_none()) {
                let previews = match previewing && has_previews(entry) {
                    false => Vec::new(),
                    true if ns_name == namespace => previews(ns, plan, entry),
                    true => {
                        let other = plans
                            .entry(ns_name)
                            .or_insert_with(|| lane_plan(index, ns_name, now));
                        previews(ns, other, entry)
                    }
                };
                claims.push(Claim {
                    previews,
                    ..entry_claim(ns_name, entry)
                });
            }
        }
        Claims { claims }
    }

    /// The hostnames of `entry` (of `namespace`) that an older claim holds, each with the
    /// first holder by age.
    pub fn contested(&self, namespace: &str, entry: &LaneEntry) -> Vec<Contested> {
        let me = entry_claim(namespace, entry);
        let mut older: Vec<&Claim> = self
            .claims
            .iter()
            .filter(|c| c.age < me.age && shares_parent(c, &me))
            .collect();
        older.sort_by(|a, b| a.age.cmp(&b.age));
        let hosts: Vec<Option<&String>> = match me.hostnames.is_empty() {
            true => vec![None],
            false => me.hostnames.iter().map(Some).collect(),
        };
        let same_ns = |c: &Claim| c.holder.1.namespace == namespace;
        hosts
            .into_iter()
            .filter_map(|host| {
                older.iter().find_map(|c| {
                    if !c.hostnames.is_empty()
                        && host.is_some_and(|h| !c.hostnames.iter().any(|o| overlap(h, o)))
                    {
                        return None;
                    }
                    let path = contended_path(&me.paths, &c.paths, same_ns(c))?;
                    Some(Contested {
                        hostname: host.cloned(),
                        holder: c.holder.clone(),
                        path: format!("{} {}", path.0, path.1),
                    })
                })
            })
            .collect()
    }

    /// Who holds `host`, a preview hostname of a lane of `entry`: an entry or HTTPRoute serving
    /// it as one of its hostnames, else an older entry giving a lane the same preview hostname.
    pub fn preview_holder(
        &self,
        namespace: &str,
        entry: &LaneEntry,
        host: &str,
    ) -> Option<(Kind, ObjectKey)> {
        let me = entry_claim(namespace, entry);
        let host = host.to_ascii_lowercase();
        let others = || {
            self.claims
                .iter()
                .filter(|c| c.holder != me.holder && shares_parent(c, &me))
        };
        let served = others().find(|c| c.hostnames.contains(&host));
        let previewed = || {
            others()
                .filter(|c| c.age < me.age && c.previews.contains(&host))
                .min_by(|a, b| a.age.cmp(&b.age))
        };
        served.or_else(previewed).map(|c| c.holder.clone())
    }
}

/// Whether the entry gives lanes preview hostnames.
pub(crate) fn has_previews(entry: &LaneEntry) -> bool {
    entry
        .spec
        .preview_hostnames
        .as_ref()
        .is_some_and(|p| !p.is_empty())
}

/// An entry's claim, without its preview hostnames.
fn entry_claim(namespace: &str, entry: &LaneEntry) -> Claim {
    let key = ObjectKey::new(namespace, &entry.name_any());
    let created = entry.creation_timestamp().map(|t| t.0);
    let paths = entry
        .spec
        .rules
        .iter()
        .flatten()
        .flat_map(|r| {
            let every = r.matches.is_empty().then(|| prefix("/"));
            let paths = r.matches.iter().map(|m| match &m.path {
                Some(p) => (p.type_.clone(), p.value.clone()),
                None => prefix("/"),
            });
            every.into_iter().chain(paths)
        })
        .collect();
    Claim {
        holder: (Kind::LaneEntry, key.clone()),
        age: Some((created, key)),
        parents: entry
            .spec
            .parent_refs
            .iter()
            .flatten()
            .map(|p| crate::lanes::model::parent_key!(p, namespace))
            .collect(),
        hostnames: lower(entry.spec.hostnames.iter().flatten()),
        paths,
        previews: Vec::new(),
    }
}

fn route_claim(route: &RouteInfo) -> Claim {
    Claim {
        holder: (Kind::HttpRoute, ObjectKey::new(&route.namespace, &route.name)),
        age: None,
        parents: route.parents.clone(),
        hostnames: lower(route.hostnames.iter()),
        paths: route.plain_paths.clone(),
        previews: Vec::new(),
    }
}

/// The preview hostnames of the lanes `entry` lets requests into.
fn previews(ns: &Namespace, plan: &LanePlan, entry: &LaneEntry) -> Vec<String> {
    let key = ObjectKey::new(&entry.namespace().unwrap_or_default(), &entry.name_any());
    let covering = entry.spec.hostnames.clone().unwrap_or_default();
    let lanes = entry_lanes(ns, plan, entry, &key, &mut Vec::new());
    let templates = entry.spec.preview_hostnames.iter().flatten();
    lanes
        .iter()
        .flat_map(|lane| {
            templates
                .clone()
                .filter_map(|t| preview_hostname(t, lane.lane, &covering).ok())
        })
        .map(|h| h.to_ascii_lowercase())
        .collect()
}

fn prefix(value: &str) -> PathMatch {
    ("PathPrefix".to_owned(), value.to_owned())
}

fn lower<'a>(hosts: impl Iterator<Item = &'a String>) -> Vec<String> {
    hosts.map(|h| h.to_ascii_lowercase()).collect()
}

fn shares_parent(a: &Claim, b: &Claim) -> bool {
    a.parents.iter().any(|p| b.parents.iter().any(|q| p.overlaps(q)))
}

/// Whether two hostnames can match one request: equal, or a wildcard (`*.example.com`) that
/// covers the other (or both wildcards, one covering the other).
pub(super) fn overlap(a: &str, b: &str) -> bool {
    let covers = |w: &str, h: &str| {
        w.strip_prefix('*')
            .is_some_and(|suffix| h.ends_with(suffix) && h.len() > suffix.len())
    };
    a == b || covers(a, b) || covers(b, a)
}

/// The first of `mine` that contends with one of `theirs`: the same match in one namespace,
/// one covering the other across namespaces.
fn contended_path<'a>(
    mine: &'a [PathMatch],
    theirs: &[PathMatch],
    same_namespace: bool,
) -> Option<&'a PathMatch> {
    mine.iter().find(|m| {
        theirs
            .iter()
            .any(|t| *m == t || (!same_namespace && (covers(m, t) || covers(t, m))))
    })
}

/// Whether every request `inner` matches is also matched by `outer`: a `PathPrefix` covers the
/// paths below it (by whole path segments, as the Gateway API matches prefixes).
pub(super) fn covers(outer: &PathMatch, inner: &PathMatch) -> bool {
    let (kind, value) = outer;
    if outer == inner {
        return true;
    }
    if kind != "PathPrefix" || !matches!(inner.0.as_str(), "PathPrefix" | "Exact") {
        return false;
    }
    let base = value.trim_end_matches('/');
    inner.1 == base || inner.1.starts_with(&format!("{base}/"))
}

#[cfg(test)]
mod tests {
    use super::{covers, overlap, prefix};

    fn exact(v: &str) -> (String, String) {
        ("Exact".to_owned(), v.to_owned())
    }

    #[test]
    fn a_prefix_covers_the_paths_below_it_by_whole_segments() {
        assert!(covers(&prefix("/"), &exact("/checkout")));
        assert!(covers(&prefix("/shop"), &prefix("/shop/cart")));
        assert!(covers(&prefix("/shop/"), &exact("/shop")));
        assert!(!covers(&prefix("/shop"), &exact("/shopping")));
        assert!(!covers(&exact("/checkout"), &prefix("/")));
        assert!(!covers(
            &prefix("/"),
            &("RegularExpression".to_owned(), "/.*".to_owned())
        ));
    }

    #[test]
    fn hostnames_overlap_when_equal_or_under_a_wildcard() {
        assert!(overlap("shop.example.com", "shop.example.com"));
        assert!(overlap("*.example.com", "api.example.com"));
        assert!(overlap("a.b.example.com", "*.example.com"));
        assert!(overlap("*.example.com", "*.b.example.com"));
        assert!(!overlap("*.example.com", "example.com"));
        assert!(!overlap("shop.example.com", "api.example.com"));
    }
}
