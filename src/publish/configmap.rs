//! The in-cluster config centre: one ConfigMap with a key per `<application>.tag-router`.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::{ConfigCentre, PublishError};
use crate::lanes::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(super) const NAME: &str = "configmap";

fn err(e: impl ToString) -> PublishError {
    PublishError::redacted(NAME, e, &[])
}

pub struct ConfigMapCentre {
    api: Api<ConfigMap>,
    name: String,
}

impl ConfigMapCentre {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        ConfigMapCentre {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    /// What laneway published before, by key: so that rules of TagRules deleted while it was
    /// not running are retired too, and message ownership documents keep their history.
    pub async fn contents(&self) -> Result<BTreeMap<String, String>, PublishError> {
        let cm = self.api.get_opt(&self.name).await.map_err(err)?;
        Ok(cm.and_then(|c| c.data).unwrap_or_default())
    }

    async fn patch(&self, key: &str, content: Option<&str>) -> Result<(), PublishError> {
        let patch = json!({"data": {key: content}});
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 && content.is_some() => {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": self.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                    "data": {key: content},
                }))
                .map_err(err)?;
                self.api
                    .create(&PostParams::default(), &cm)
                    .await
                    .map(|_| ())
                    .map_err(err)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            // The API server refused the content itself (e.g. the ConfigMap would pass 1 MiB).
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && !matches!(e.code, 409 | 429) => {
                Err(err(kube::Error::Api(e)).refused())
            }
            Err(e) => Err(err(e)),
        }
    }
}

impl ConfigCentre for ConfigMapCentre {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>> {
        async move {
            let cm = self.api.get_opt(&self.name).await.map_err(err)?;
            Ok(cm.and_then(|c| c.data).and_then(|mut d| d.remove(key)))
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        self.patch(key, Some(content)).boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        self.patch(key, None).boxed()
    }
}
