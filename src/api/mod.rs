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
    HeaderMatch, LaneMatch, LaneRoute, LaneRouteSpec, LaneRouteStatus, ServiceLaneStatus, SubsetSource,
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

/// A lane header must not be one that proxies consume or rewrite on the way: the request's
/// target (`Host`), its framing (`Content-Length`, `Transfer-Encoding`) or a hop-by-hop header.
/// Pseudo-headers (`:authority`) already fail the token pattern.
pub(crate) const LANE_HEADER_RULE: &str =
    "!(self.lowerAscii() in ['host', 'content-length', 'transfer-encoding', \
     'connection', 'keep-alive', 'te', 'trailer', 'upgrade']) && !self.lowerAscii().startsWith('proxy-')";
pub(crate) const LANE_HEADER_MESSAGE: &str = "must not be Host, Content-Length, Transfer-Encoding or a \
     hop-by-hop header (Connection, Keep-Alive, Proxy-*, TE, Trailer, Upgrade): proxies consume or rewrite them";

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
