//! The parts of an HTTPRoute, typed: an entry's parents, matches and backends as the Gateway API
//! structs hold them (`src/gateway`), header filters, and the split of a rule list at the Gateway
//! API's limits. A match value a route cannot hold is an error naming the field.

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::de::DeserializeOwned;

use crate::api::{ParentRef, RouteMatch};
use crate::gateway::{
    HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesBackendRefsFilters,
    HttpRouteRulesBackendRefsFiltersRequestHeaderModifier,
    HttpRouteRulesBackendRefsFiltersRequestHeaderModifierSet,
    HttpRouteRulesBackendRefsFiltersResponseHeaderModifier,
    HttpRouteRulesBackendRefsFiltersResponseHeaderModifierAdd, HttpRouteRulesBackendRefsFiltersType,
    HttpRouteRulesFilters, HttpRouteRulesFiltersRequestHeaderModifier,
    HttpRouteRulesFiltersRequestHeaderModifierSet, HttpRouteRulesFiltersResponseHeaderModifier,
    HttpRouteRulesFiltersResponseHeaderModifierAdd, HttpRouteRulesFiltersType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeaders, HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPath,
    HttpRouteRulesMatchesQueryParams,
};

/// Rules per HTTPRoute: the Gateway API allows 16, but Traefik orders a route's rules by adding
/// up to their count to each rule's priority, where one query parameter match counts 10: with
/// 10 rules a route at most, a rule with one more query match always wins, as the Gateway API
/// wants (lane links rely on it).
const MAX_RULES: usize = 10;
/// Matches across a route's rules (Gateway API limit).
const MAX_MATCHES: usize = 128;

/// An entry's parent as an HTTPRoute's parent, as the user wrote it.
pub(super) fn parent_ref(p: &ParentRef) -> HttpRouteParentRefs {
    HttpRouteParentRefs {
        group: p.group.clone(),
        kind: p.kind.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        port: p.port,
        section_name: p.section_name.clone(),
    }
}

pub(super) fn backend_ref(service: &str, port: i32) -> HttpRouteRulesBackendRefs {
    HttpRouteRulesBackendRefs {
        name: service.to_owned(),
        port: Some(port),
        ..Default::default()
    }
}

/// A backendRef filter that sets the lane's headers, so that later hops keep the request in
/// the lane it was sent into by weight.
pub(super) fn set_headers(headers: &[(String, String)]) -> HttpRouteRulesBackendRefsFilters {
    let set = headers
        .iter()
        .map(
            |(n, v)| HttpRouteRulesBackendRefsFiltersRequestHeaderModifierSet {
                name: n.clone(),
                value: v.clone(),
            },
        )
        .collect();
    HttpRouteRulesBackendRefsFilters {
        r#type: HttpRouteRulesBackendRefsFiltersType::RequestHeaderModifier,
        request_header_modifier: Some(HttpRouteRulesBackendRefsFiltersRequestHeaderModifier {
            set: Some(set),
            ..Default::default()
        }),
        extension_ref: None,
        request_mirror: None,
        request_redirect: None,
        response_header_modifier: None,
        url_rewrite: None,
    }
}

/// A rule filter that sets the lane's headers, for the next hops.
pub(super) fn rule_set_headers(headers: &[(String, String)]) -> HttpRouteRulesFilters {
    let set = headers
        .iter()
        .map(|(n, v)| HttpRouteRulesFiltersRequestHeaderModifierSet {
            name: n.clone(),
            value: v.clone(),
        })
        .collect();
    HttpRouteRulesFilters {
        request_header_modifier: Some(HttpRouteRulesFiltersRequestHeaderModifier {
            set: Some(set),
            ..Default::default()
        }),
        ..no_filter(HttpRouteRulesFiltersType::RequestHeaderModifier)
    }
}

/// A rule filter that removes a request header.
pub(super) fn rule_remove_header(name: &str) -> HttpRouteRulesFilters {
    HttpRouteRulesFilters {
        request_header_modifier: Some(HttpRouteRulesFiltersRequestHeaderModifier {
            remove: Some(vec![name.to_owned()]),
            ..Default::default()
        }),
        ..no_filter(HttpRouteRulesFiltersType::RequestHeaderModifier)
    }
}

/// A rule filter that adds a header to the answer.
pub(super) fn add_response_header(name: &str, value: &str) -> HttpRouteRulesFilters {
    HttpRouteRulesFilters {
        response_header_modifier: Some(HttpRouteRulesFiltersResponseHeaderModifier {
            add: Some(vec![HttpRouteRulesFiltersResponseHeaderModifierAdd {
                name: name.to_owned(),
                value: value.to_owned(),
            }]),
            ..Default::default()
        }),
        ..no_filter(HttpRouteRulesFiltersType::ResponseHeaderModifier)
    }
}

fn no_filter(r#type: HttpRouteRulesFiltersType) -> HttpRouteRulesFilters {
    HttpRouteRulesFilters {
        r#type,
        extension_ref: None,
        request_header_modifier: None,
        request_mirror: None,
        request_redirect: None,
        response_header_modifier: None,
        url_rewrite: None,
    }
}

/// A backendRef filter that adds a header to the answer.
pub(super) fn backend_add_response_header(name: &str, value: &str) -> HttpRouteRulesBackendRefsFilters {
    HttpRouteRulesBackendRefsFilters {
        r#type: HttpRouteRulesBackendRefsFiltersType::ResponseHeaderModifier,
        response_header_modifier: Some(HttpRouteRulesBackendRefsFiltersResponseHeaderModifier {
            add: Some(vec![HttpRouteRulesBackendRefsFiltersResponseHeaderModifierAdd {
                name: name.to_owned(),
                value: value.to_owned(),
            }]),
            ..Default::default()
        }),
        extension_ref: None,
        request_header_modifier: None,
        request_mirror: None,
        request_redirect: None,
        url_rewrite: None,
    }
}

pub(super) fn header_match(
    name: &str,
    value: &str,
    type_: Option<HttpRouteRulesMatchesHeadersType>,
) -> HttpRouteRulesMatchesHeaders {
    HttpRouteRulesMatchesHeaders {
        name: name.to_owned(),
        r#type: type_,
        value: value.to_owned(),
    }
}

/// One of the Gateway API's names for a value (`PathPrefix`, `GET`), as its typed enum; the
/// error lists the names it knows.
pub(super) fn parse<T: DeserializeOwned>(value: &str, field: String) -> Result<T, (String, String)> {
    T::deserialize(StrDeserializer::<ValueError>::new(value)).map_err(|e| (field, e.to_string()))
}

/// The entry's matches as HTTPRoute matches (the path `PathPrefix /` and header and query
/// types `Exact` unless given); `Err`: the field that an HTTPRoute cannot hold, and why.
pub(super) fn typed_matches(
    matches: &[RouteMatch],
    field: &str,
) -> Result<Vec<HttpRouteRulesMatches>, (String, String)> {
    matches
        .iter()
        .enumerate()
        .map(|(j, m)| typed_match(m, &format!("{field}[{j}]")))
        .collect()
}

pub(super) fn typed_match(m: &RouteMatch, field: &str) -> Result<HttpRouteRulesMatches, (String, String)> {
    let (path_type, path) = m
        .path
        .as_ref()
        .map_or(("PathPrefix", "/"), |p| (p.type_.as_str(), p.value.as_str()));
    let headers = m
        .headers
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let type_ = h.type_.as_deref().unwrap_or("Exact");
            let type_ = parse(type_, format!("{field}.headers[{k}].type"))?;
            Ok(header_match(&h.name, &h.value, Some(type_)))
        })
        .collect::<Result<Vec<_>, (String, String)>>()?;
    let query_params = m
        .query_params
        .iter()
        .enumerate()
        .map(|(k, q)| {
            let type_ = q.type_.as_deref().unwrap_or("Exact");
            Ok(HttpRouteRulesMatchesQueryParams {
                name: q.name.clone(),
                r#type: Some(parse(type_, format!("{field}.queryParams[{k}].type"))?),
                value: q.value.clone(),
            })
        })
        .collect::<Result<Vec<_>, (String, String)>>()?;
    Ok(HttpRouteRulesMatches {
        path: Some(HttpRouteRulesMatchesPath {
            r#type: Some(parse(path_type, format!("{field}.path.type"))?),
            value: Some(path.to_owned()),
        }),
        headers: (!headers.is_empty()).then_some(headers),
        query_params: (!query_params.is_empty()).then_some(query_params),
        method: m
            .method
            .as_deref()
            .map(|method| parse(method, format!("{field}.method")))
            .transpose()?,
    })
}

/// `m` with the lane's headers added (exact matches).
pub(super) fn with_lane_headers(
    m: &HttpRouteRulesMatches,
    lane_headers: &[(String, String)],
) -> HttpRouteRulesMatches {
    let mut m = m.clone();
    let lane = lane_headers
        .iter()
        .map(|(n, v)| header_match(n, v, Some(HttpRouteRulesMatchesHeadersType::Exact)));
    let headers: Vec<_> = m.headers.take().into_iter().flatten().chain(lane).collect();
    m.headers = (!headers.is_empty()).then_some(headers);
    m
}

/// Rules in chunks that stay within the Gateway API limits per HTTPRoute.
pub(super) fn split(rules: Vec<HttpRouteRules>) -> Vec<Vec<HttpRouteRules>> {
    let mut out: Vec<Vec<HttpRouteRules>> = Vec::new();
    let mut matches = 0;
    for rule in rules {
        let n = rule.matches.as_ref().map_or(1, Vec::len).max(1);
        let full = out
            .last()
            .is_none_or(|c| c.len() >= MAX_RULES || matches + n > MAX_MATCHES);
        if full {
            out.push(Vec::new());
            matches = 0;
        }
        matches += n;
        if let Some(chunk) = out.last_mut() {
            chunk.push(rule);
        }
    }
    out
}
