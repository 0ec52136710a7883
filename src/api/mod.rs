//! The custom resources laneway serves: `LaneRoute`, `TagRule` and `LaneEntry`
//! (`laneway.io/v1alpha1`).

mod condition;
mod laneentry;
mod laneroute;
mod tagrule;

pub use condition::{Condition, ConditionStatus, ConditionType, Reason};
pub use laneentry::{
    Backend, EntryLaneStatus, EntryMode, EntryParentStatus, EntryRouteStatus, EntryRule, LaneEntry,
    LaneEntrySpec, LaneEntryStatus, MeshEntry, ParentRef, PathMatch, RouteMatch, StickyGray, ValueMatch,
    DEFAULT_LANE_HEADER,
};
pub use laneroute::{
    HeaderMatch, LaneMatch, LaneRoute, LaneRouteSpec, LaneRouteStatus, RpcCondition, RpcEntry,
    ServiceLaneStatus, StickyKey, SubsetSource,
};
pub use tagrule::{
    DubboSpec, NacosNamingSpec, Publication, TagRule, TagRuleSpec, TagRuleStatus, TagSpec, TagStatus,
};

/// Default pod label that carries an instance's static lane.
pub const DEFAULT_LANE_LABEL: &str = "laneway.io/lane";

/// CEL rule shared by every field that holds a lane or tag name: a Kubernetes label value
/// that is not empty (Dubbo treats `|` as a multi-level tag separator, which the pattern excludes).
pub(crate) const LANE_NAME_RULE: &str = "self.matches('^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')";
pub(crate) const LANE_NAME_MESSAGE: &str = "must be a valid label value: 1-63 characters, \
     alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric (no '|')";

/// A lane header (an entry's `header`, a LaneRoute's `match.headers[].name`) must not be one
/// that proxies consume or rewrite on the way: the request's target (`Host`), its framing
/// (`Content-Length`, `Transfer-Encoding`), a hop-by-hop header, or a forwarding header
/// (`Forwarded`, `X-Forwarded-*`). Nor one that carries credentials or that the lane link and
/// cookie use (`Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`): a request in no
/// lane loses the lane header at the entry, and lane rules add their own `Cookie` match and
/// answer with `Set-Cookie`. Pseudo-headers (`:authority`) already fail the token pattern.
pub(crate) const LANE_HEADER_RULE: &str =
    "!(self.lowerAscii() in ['host', 'content-length', 'transfer-encoding', \
     'connection', 'keep-alive', 'te', 'trailer', 'upgrade', \
     'authorization', 'cookie', 'set-cookie', 'forwarded']) \
     && !self.lowerAscii().startsWith('proxy-') && !self.lowerAscii().startsWith('x-forwarded-')";
pub(crate) const LANE_HEADER_MESSAGE: &str = "must not be Host, Content-Length, Transfer-Encoding, \
     a hop-by-hop header (Connection, Keep-Alive, Proxy-*, TE, Trailer, Upgrade), a forwarding header \
     (Forwarded, X-Forwarded-*), Authorization, Cookie or Set-Cookie: proxies consume or rewrite them, \
     laneway removes the lane header from requests in no lane, and lane links match and set cookies";

/// Header names of one match are unique, case-insensitively (HTTP header names are): the
/// Gateway API keeps one match per name, so a second one would make laneway's route invalid.
pub(crate) const UNIQUE_HEADERS_RULE: &str =
    "self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))";
pub(crate) const UNIQUE_HEADERS_MESSAGE: &str = "header names must be unique (case-insensitive)";

/// A Dubbo attachment key a condition or sticky draw reads: letters, digits, `_` and `-`.
pub(crate) const RPC_KEY_RULE: &str = "self.matches('^[A-Za-z0-9_-]+$')";
pub(crate) const RPC_KEY_MESSAGE: &str = "must be an attachment key of letters, digits, '_' or '-'";
/// A request header a condition or sticky draw reads: an HTTP token.
pub(crate) const RPC_HEADER_RULE: &str = "self.matches('^[A-Za-z0-9!#$%&*+.^_|~-]+$')";
pub(crate) const RPC_HEADER_MESSAGE: &str = "must be an HTTP header name";
/// Values in Dubbo's condition syntax: comma-separated exact values (with `*` wildcards) and
/// integer ranges `low~high`, no empty item, no blank.
pub(crate) const RPC_VALUES_RULE: &str =
    "self.matches('^(-?[0-9]{1,18}~-?[0-9]{1,18}|[^,~ \\t]+)(,(-?[0-9]{1,18}~-?[0-9]{1,18}|[^,~ \\t]+))*$')";
pub(crate) const RPC_VALUES_MESSAGE: &str = "must be a comma-separated list of values (exact, with '*' wildcards, or integer ranges such as 1~100), without blanks or empty items";

/// Ranges run from low to high: `100~1` would match nothing.
pub(crate) const RPC_RANGES_RULE: &str =
    "self.split(',').all(v, !v.contains('~') || int(v.split('~')[0]) <= int(v.split('~')[1]))";
pub(crate) const RPC_RANGES_MESSAGE: &str = "a range must run from low to high (1~100, not 100~1)";

/// The lane name reserved for requests and instances in no lane: the Nacos mark of untagged
/// instances (`laneway.lanes`), so a lane of that name would be served by baseline's instances.
pub const BASELINE_LANE: &str = "baseline";

/// CEL that holds when the lane name `expr` is not [`BASELINE_LANE`].
pub(crate) fn not_baseline(expr: &str) -> String {
    format!("{expr} != '{BASELINE_LANE}'")
}
pub(crate) const BASELINE_MESSAGE: &str =
    "a lane must not be named baseline: that is the mark of untagged instances (requests in no lane)";

/// The CRDs as YAML documents, in the form checked in under `crds/`.
pub fn crd_documents() -> Vec<(&'static str, String)> {
    use kube::CustomResourceExt;
    // Long lines stay whole (never folded): a description reads as one line in a diff.
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    let render =
        |crd| serde_saphyr::to_string_with_options(&crd, options.clone()).expect("a CRD always serialises");
    vec![
        ("laneentries.laneway.io.yaml", render(LaneEntry::crd())),
        ("laneroutes.laneway.io.yaml", render(LaneRoute::crd())),
        ("tagrules.laneway.io.yaml", render(TagRule::crd())),
    ]
}
