//! laneway's own kinds as the watches read them: an object that does not deserialize (stored
//! under an older schema, or edited around validation) is kept as its metadata and the error,
//! so that it is reported on its own and never fails the watch of its whole kind.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;

use crate::kind::{Kind, Typed};

/// An object of kind `K`, read whole, or only its metadata and why the rest could not be read.
#[derive(Clone, Debug)]
pub enum Lenient<K> {
    Read(K),
    Unreadable { meta: Box<ObjectMeta>, error: String },
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        // A reader of a field may panic on a value past what it can hold (a duration of more
        // than u64 seconds): that object is unreadable, not the watch.
        let read = std::panic::catch_unwind(|| K::deserialize(&value).map_err(|e| e.to_string()))
            .unwrap_or_else(|_| Err("a value is out of range".to_owned()));
        match read {
            Ok(object) => Ok(Lenient::Read(object)),
            Err(error) => {
                let meta = value.get("metadata").map_or(Ok(ObjectMeta::default()), |m| {
                    ObjectMeta::deserialize(m).map_err(D::Error::custom)
                })?;
                Ok(Lenient::Unreadable {
                    meta: Box::new(meta),
                    error,
                })
            }
        }
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Lenient::Read(object) => object.meta(),
            Lenient::Unreadable { meta, .. } => meta,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Lenient::Read(object) => object.meta_mut(),
            Lenient::Unreadable { meta, .. } => meta,
        }
    }
}

impl<K: Typed> Typed for Lenient<K> {
    const KIND: Kind = K::KIND;
}

/// An object that could not be read: enough to report it on itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub kind: Kind,
    pub reference: ObjectReference,
    pub error: String,
}

impl<K: Typed> Lenient<K> {
    /// The object, or what reports it when it could not be read.
    pub fn into_result(self) -> Result<K, Box<Unreadable>> {
        match self {
            Lenient::Read(object) => Ok(object),
            Lenient::Unreadable { meta, error } => Err(Box::new(Unreadable {
                kind: K::KIND,
                reference: ObjectReference {
                    api_version: Some(K::api_version(&()).into_owned()),
                    kind: Some(K::kind(&()).into_owned()),
                    namespace: meta.namespace,
                    name: meta.name,
                    uid: meta.uid,
                    resource_version: meta.resource_version,
                    ..Default::default()
                },
                error,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LaneRoute;

    fn lane_route(source: &str) -> Lenient<LaneRoute> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
            "metadata": {"name": "gray", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
            "spec": {"services": ["order"]},
            "status": {"services": [{"name": "order", "source": source}]},
        }))
        .expect("a LaneRoute reads, whole or not")
    }

    #[test]
    fn an_object_that_does_not_deserialize_keeps_its_metadata_and_the_error() {
        assert!(matches!(lane_route("Baseline"), Lenient::Read(r) if r.status.is_some()));
        // A string to the schema, but no source laneway knows (a status written by hand).
        let Err(bad) = lane_route("Hacked").into_result() else {
            panic!("read although its status names no known source");
        };
        assert_eq!(bad.kind, Kind::LaneRoute);
        assert_eq!(bad.reference.name.as_deref(), Some("gray"));
        assert_eq!(bad.reference.namespace.as_deref(), Some("shop"));
        assert_eq!(bad.reference.kind.as_deref(), Some("LaneRoute"));
        assert_eq!(bad.reference.api_version.as_deref(), Some("laneway.io/v1alpha1"));
        assert_eq!(bad.reference.resource_version.as_deref(), Some("7"));
        assert_eq!(bad.error, "unknown subset source \"Hacked\"");
    }

    #[test]
    fn a_ttl_past_what_a_duration_holds_makes_the_object_unreadable_not_a_panic() {
        let route: Lenient<LaneRoute> = serde_json::from_value(serde_json::json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
            "metadata": {"name": "gray", "namespace": "shop"},
            "spec": {"services": ["order"], "ttl": "99999999999999999999h"},
        }))
        .expect("a LaneRoute reads, whole or not");
        let Err(bad) = route.into_result() else {
            panic!("read a ttl of more than u64 seconds");
        };
        assert_eq!(bad.error, "a value is out of range");
    }

    #[test]
    fn a_list_with_one_unreadable_object_still_reads_the_others() {
        let list: kube::core::ObjectList<Lenient<LaneRoute>> = serde_json::from_value(serde_json::json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneRouteList",
            "metadata": {"resourceVersion": "9"},
            "items": [
                {"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
                 "metadata": {"name": "bad", "namespace": "shop"},
                 "spec": {"services": "order"}},
                {"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
                 "metadata": {"name": "good", "namespace": "shop"},
                 "spec": {"services": ["order"]}},
            ],
        }))
        .expect("the list reads");
        let read: Vec<Result<String, String>> = list
            .items
            .into_iter()
            .map(|o| match o.into_result() {
                Ok(r) => Ok(r.meta().name.clone().unwrap_or_default()),
                Err(u) => Err(u.reference.name.unwrap_or_default()),
            })
            .collect();
        assert_eq!(read, [Err("bad".to_owned()), Ok("good".to_owned())]);
    }
}
