//! How a browser enters a lane at a gateway, where it cannot send the lane header: a lane link
//! (`?lane=gray`) that sets a cookie, the cookie itself on later requests, and preview
//! hostnames (`gray.preview.shop.example.com`) that are the lane.
//!
//! The rules rely on the Gateway API's precedence between rules with the same path: more header
//! matches first, then more query parameter matches. The lane header comes first, then the link,
//! then the cookie; so that a link wins over a cookie it replaces, each link rule has a twin
//! that also matches "some lane cookie is set" (one header more than the cookie rule), and each
//! lane header rule has one too (so that it stays ahead of the link's twin). Pure.

use std::collections::BTreeMap;

use super::context::{EntryContext, EntryLane, ValidRule};
use super::route_parts::*;
use crate::api::LaneEntry;
use crate::gateway::{
    HttpRoute, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesBackendRefsFilters,
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesQueryParams,
    HttpRouteRulesMatchesQueryParamsType, HttpRouteSpec,
};
use crate::lanes::naming;
use crate::lanes::problem::Problem;

/// The lane cookie's value for a request drawn into no lane: no lane is named so.
const NO_LANE: &str = "-";

/// Longest hostname.
const MAX_HOSTNAME: usize = 253;

/// The lane link and cookie of an entry: the cookie is named as the lane header.
pub(super) struct Link<'a> {
    cookie: &'a str,
    query: &'a str,
}

impl<'a> Link<'a> {
    pub fn of(entry: &'a LaneEntry) -> Link<'a> {
        Link {
            cookie: entry.header(),
            query: entry.lane_query(),
        }
    }

    /// What a browser opens to enter `lane`, for the entry's status.
    pub fn query_for(&self, lane: &str) -> String {
        format!("?{}={lane}", self.query)
    }

    /// The rules that enter `lane` at one of the entry's rules (`typed`: its matches), besides
    /// the lane header's own: the header with a lane cookie set, the link (with and without a
    /// cookie set; it sets the cookie), and the cookie. Each sets the lane's headers for the
    /// next hops.
    pub fn lane_rules(
        &self,
        typed: &[HttpRouteRulesMatches],
        lane: &EntryLane,
        backend: HttpRouteRulesBackendRefs,
    ) -> Vec<HttpRouteRules> {
        let header = |m: &HttpRouteRulesMatches| with_lane_headers(m, &lane.headers);
        let link = |m: &HttpRouteRulesMatches| with_query(m, self.query, lane.lane, Exact);
        let rule = |matches: Vec<HttpRouteRulesMatches>, set_cookie: bool| {
            let mut filters = vec![rule_set_headers(&lane.headers)];
            if set_cookie {
                filters.push(add_response_header("set-cookie", &self.set_cookie(lane.lane)));
            }
            HttpRouteRules {
                matches: Some(matches),
                filters: Some(filters),
                backend_refs: Some(vec![backend.clone()]),
                ..Default::default()
            }
        };
        vec![
            rule(typed.iter().map(|m| self.any_cookie(&header(m))).collect(), false),
            rule(typed.iter().map(|m| self.any_cookie(&link(m))).collect(), true),
            rule(typed.iter().map(link).collect(), true),
            rule(typed.iter().map(|m| self.cookie(m, lane.lane)).collect(), false),
        ]
    }

    /// `?lane=` with no value: to baseline, clearing the cookie (with and without one set), and
    /// without a lane header the entry does not route (as [`no_lane_filter`]).
    pub fn clear_rules(
        &self,
        typed: &[HttpRouteRulesMatches],
        baseline: HttpRouteRulesBackendRefs,
    ) -> Vec<HttpRouteRules> {
        let clear = |m: &HttpRouteRulesMatches| with_query(m, self.query, "^$", Regex);
        let rule = |matches: Vec<HttpRouteRulesMatches>| HttpRouteRules {
            matches: Some(matches),
            filters: Some(vec![
                no_lane_filter(self.cookie),
                add_response_header(
                    "set-cookie",
                    &format!("{}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax", self.cookie),
                ),
            ]),
            backend_refs: Some(vec![baseline.clone()]),
            ..Default::default()
        };
        vec![
            rule(typed.iter().map(|m| self.any_cookie(&clear(m))).collect()),
            rule(typed.iter().map(clear).collect()),
        ]
    }

    /// For a sticky draw: a request with the cookie of the draw into no lane goes to baseline,
    /// drawn no more.
    pub fn drawn_to_baseline_rule(
        &self,
        typed: &[HttpRouteRulesMatches],
        baseline: HttpRouteRulesBackendRefs,
    ) -> HttpRouteRules {
        HttpRouteRules {
            matches: Some(typed.iter().map(|m| self.cookie(m, NO_LANE)).collect()),
            filters: Some(vec![no_lane_filter(self.cookie)]),
            backend_refs: Some(vec![baseline]),
            ..Default::default()
        }
    }

    /// The filter that gives a request drawn into `lane` (`None`: baseline) its cookie.
    pub fn drawn(&self, lane: Option<&str>) -> HttpRouteRulesBackendRefsFilters {
        backend_add_response_header("set-cookie", &self.set_cookie(lane.unwrap_or(NO_LANE)))
    }

    fn set_cookie(&self, lane: &str) -> String {
        format!("{}={lane}; Path=/; HttpOnly; SameSite=Lax", self.cookie)
    }

    /// `m` and a `Cookie` header holding this cookie with value `lane`, exactly (not a cookie
    /// whose name ends in this one's).
    fn cookie(&self, m: &HttpRouteRulesMatches, lane: &str) -> HttpRouteRulesMatches {
        let value = format!(
            "(^|;\\s*){}={}(;|$)",
            regex_escape(self.cookie),
            regex_escape(lane)
        );
        with_cookie(m, value)
    }

    /// `m` and a `Cookie` header holding this cookie with any value.
    fn any_cookie(&self, m: &HttpRouteRulesMatches) -> HttpRouteRulesMatches {
        with_cookie(m, format!("(^|;\\s*){}=[^;]", regex_escape(self.cookie)))
    }
}

use HttpRouteRulesMatchesQueryParamsType::{Exact, RegularExpression as Regex};

/// At an edge entry, a request in no lane the entry routes loses its lane header: a lane the
/// entry does not expose is not entered at a later hop either.
pub(super) fn no_lane_filter(header: &str) -> crate::gateway::HttpRouteRulesFilters {
    rule_remove_header(header)
}

fn with_query(
    m: &HttpRouteRulesMatches,
    name: &str,
    value: &str,
    type_: HttpRouteRulesMatchesQueryParamsType,
) -> HttpRouteRulesMatches {
    let mut m = m.clone();
    m.query_params
        .get_or_insert_with(Vec::new)
        .push(HttpRouteRulesMatchesQueryParams {
            name: name.to_owned(),
            r#type: Some(type_),
            value: value.to_owned(),
        });
    m
}

fn with_cookie(m: &HttpRouteRulesMatches, regex: String) -> HttpRouteRulesMatches {
    let mut m = m.clone();
    m.headers.get_or_insert_with(Vec::new).push(header_match(
        "cookie",
        &regex,
        Some(HttpRouteRulesMatchesHeadersType::RegularExpression),
    ));
    m
}

/// `s` matched literally by a regular expression (RE2, PCRE and ECMAScript alike).
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if !c.is_ascii_alphanumeric() && c != '_' && c != '-' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why `lane` gets no hostname from `template`, if it does not.
pub(super) fn preview_hostname(template: &str, lane: &str, covering: &[String]) -> Result<String, String> {
    let label = lane.len() <= 63
        && lane
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !lane.starts_with('-')
        && !lane.ends_with('-');
    if !label {
        return Err(
            "the lane's name is not a DNS label (lower-case letters, digits and '-', at most 63)".into(),
        );
    }
    let host = template.replacen("{lane}", lane, 1);
    if host.len() > MAX_HOSTNAME {
        return Err(format!("{host:?} is longer than {MAX_HOSTNAME} characters"));
    }
    let covered = covering
        .iter()
        .find(|h| **h == host || h.strip_prefix('*').is_some_and(|suffix| host.ends_with(suffix)));
    if let Some(h) = covered {
        return Err(format!(
            "{host:?} falls under spec.hostnames {h:?}, whose rules would take its requests too"
        ));
    }
    Ok(host)
}

impl EntryContext<'_> {
    /// The preview routes of an edge entry, one per lane that has a preview hostname, and each
    /// lane's hostnames.
    pub fn preview_routes(
        &self,
        valid: &[ValidRule],
        problems: &mut Vec<Problem>,
    ) -> (Vec<HttpRoute>, BTreeMap<String, Vec<String>>) {
        let mut routes = Vec::new();
        let mut hosts_of = BTreeMap::new();
        let templates = self.entry.spec.preview_hostnames.iter().flatten();
        let covering = self.entry.spec.hostnames.clone().unwrap_or_default();
        for lane in self.lanes {
            let mut hosts = Vec::new();
            for template in templates.clone() {
                match preview_hostname(template, lane.lane, &covering) {
                    Ok(host) => hosts.extend(self.unclaimed_preview(lane.lane, host, problems)),
                    Err(reason) => problems.push(Problem::PreviewHostname {
                        entry: self.key.clone(),
                        lane: lane.lane.to_owned(),
                        template: template.clone(),
                        reason,
                    }),
                }
            }
            if hosts.is_empty() {
                continue;
            }
            let rules = self.preview_rules(valid, lane);
            let spec = HttpRouteSpec {
                parent_refs: Some(self.parent_refs()),
                hostnames: Some(hosts.clone()),
                rules: None,
            };
            for (part, chunk) in split(rules).into_iter().enumerate() {
                let name = naming::route_name(&self.key.name, &format!("preview-{}-{part}", lane.lane));
                routes.push(self.route(&name, spec.clone(), chunk));
            }
            hosts_of.insert(lane.lane.to_owned(), hosts);
        }
        (routes, hosts_of)
    }

    /// `host`, a preview hostname of `lane`, unless another entry or HTTPRoute holds it
    /// (reported).
    fn unclaimed_preview(&self, lane: &str, host: String, problems: &mut Vec<Problem>) -> Option<String> {
        let Some(holder) = self.claims.preview_holder(&self.key.namespace, self.entry, &host) else {
            return Some(host);
        };
        problems.push(Problem::HostnameConflict {
            entry: self.key.clone(),
            hostname: Some(host),
            lane: Some(lane.to_owned()),
            holder,
            path: None,
        });
        None
    }

    /// At a preview hostname, every rule of the entry (but those matching on the lane header)
    /// sends its requests into the lane.
    fn preview_rules(&self, valid: &[ValidRule], lane: &EntryLane) -> Vec<HttpRouteRules> {
        valid
            .iter()
            .filter(|v| !v.uses_header)
            .filter_map(|v| {
                let backend = &v.rule.backend;
                let target = self.target(&backend.service, Some(lane.lane))?;
                Some(HttpRouteRules {
                    matches: Some(v.typed.clone()),
                    filters: Some(vec![rule_set_headers(&lane.headers)]),
                    backend_refs: Some(vec![backend_ref(&target, backend.port)]),
                    ..Default::default()
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{preview_hostname, regex_escape};

    #[test]
    fn a_preview_hostname_is_the_template_filled_in_unless_the_lane_is_no_dns_label() {
        let t = "{lane}.preview.shop.example.com";
        assert_eq!(
            preview_hostname(t, "dev-alice", &[]).as_deref(),
            Ok("dev-alice.preview.shop.example.com")
        );
        for lane in ["Dev-Alice", "v1.2", "dev_alice"] {
            let err = preview_hostname(t, lane, &[]).expect_err(lane);
            assert!(err.contains("DNS label"), "{err}");
        }
        let long = "a".repeat(63);
        let template = format!("{{lane}}.{}.{}.{}.example", long, long, long);
        assert!(preview_hostname(&template, &long, &[])
            .expect_err("too long")
            .contains("253"));
    }

    #[test]
    fn a_preview_hostname_under_the_entrys_own_hostnames_is_refused() {
        let t = "{lane}.shop.example.com";
        let err = preview_hostname(t, "gray", &["*.shop.example.com".to_owned()]).expect_err("covered");
        assert!(err.contains("*.shop.example.com"), "{err}");
        let err = preview_hostname(t, "gray", &["gray.shop.example.com".to_owned()]).expect_err("same");
        assert!(err.contains("falls under"), "{err}");
        assert!(preview_hostname(t, "gray", &["shop.example.com".to_owned()]).is_ok());
    }

    #[test]
    fn cookie_and_header_names_are_matched_literally() {
        assert_eq!(regex_escape("x-lane"), "x-lane");
        assert_eq!(regex_escape("v1.2"), "v1\\.2");
        assert_eq!(regex_escape("a+b|c$"), "a\\+b\\|c\\$");
    }
}
