//! The kinds of object laneway reads and writes, as one enum. Each kind's name, group and API
//! version come from its Rust type (`K::kind(&())`, as linkerd builds its resource ids), so
//! that no spelling of a kind is written twice, and a kind laneway does not know is `None`
//! where it is parsed, never taken for another.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

use crate::api::{LaneEntry, LaneRoute, TagRule};
use crate::gateway::{Gateway, GatewayClass, HttpRoute};

/// A Rust type of one of the kinds laneway handles.
pub trait Typed: Resource<DynamicType = ()> {
    const KIND: Kind;
}

macro_rules! kinds {
    ($($kind:ident => $ty:ty),* $(,)?) => {
        /// Every kind laneway reads or writes. The order (outputs, then laneway's own
        /// resources) is the order plans and reports list them in.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind {
            $($kind),*
        }

        $(impl Typed for $ty {
            const KIND: Kind = Kind::$kind;
        })*

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$kind),*];

            /// The kind as the API server spells it (`HTTPRoute`).
            pub fn name(self) -> Cow<'static, str> {
                match self {
                    $(Kind::$kind => <$ty>::kind(&())),*
                }
            }

            /// The API group (empty for the core group).
            pub fn group(self) -> Cow<'static, str> {
                match self {
                    $(Kind::$kind => <$ty>::group(&())),*
                }
            }

            /// `group/version`, or `version` for the core group.
            pub fn api_version(self) -> Cow<'static, str> {
                match self {
                    $(Kind::$kind => <$ty>::api_version(&())),*
                }
            }
        }
    };
}

kinds! {
    Pod => Pod,
    // Read by `laneway explain` from manifests, for the pods they would run.
    Deployment => Deployment,
    Service => Service,
    EndpointSlice => EndpointSlice,
    HttpRoute => HttpRoute,
    LaneRoute => LaneRoute,
    TagRule => TagRule,
    LaneEntry => LaneEntry,
    Gateway => Gateway,
    GatewayClass => GatewayClass,
}

impl Kind {
    /// The kind named `kind` in API group `group` (empty for the core group); `None` for one
    /// laneway does not handle.
    pub fn of(group: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == kind && k.group() == group)
    }

    /// The kind an object's `apiVersion` and `kind` name (any version of the group).
    pub fn of_api(api_version: &str, kind: &str) -> Option<Kind> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        Kind::of(group, kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Metrics label the kind by its API name (`kind="HTTPRoute"`).
impl EncodeLabelValue for Kind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn every_kind_is_found_again_from_its_api_version_and_name() {
        for kind in Kind::ALL {
            assert_eq!(Kind::of_api(&kind.api_version(), &kind.name()), Some(*kind));
        }
        assert_eq!(Kind::HttpRoute.name(), "HTTPRoute");
        assert_eq!(
            Kind::of_api("laneway.io/v1alpha1", "LaneEntry"),
            Some(Kind::LaneEntry)
        );
        assert_eq!(Kind::of_api("v1", "Service"), Some(Kind::Service));
        assert_eq!(Kind::of_api("example.com/v1", "LaneRoute"), None);
        assert_eq!(Kind::of_api("apps/v1", "StatefulSet"), None);
    }
}
