//! Nacos: Dubbo rules under dataId `<application>.tag-router`, group `dubbo`, through the
//! config OpenAPI (`/nacos/v1/cs/configs`); lane marks on instances through the naming admin
//! API (`/nacos/v3/admin/ns/instance`). One client logs in, with a username and password when
//! given, for both.

use futures::future::BoxFuture;
use futures::FutureExt;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

use std::collections::BTreeMap;

use super::marks::{Instance, Registry};
use super::{ConfigCentre, PublishError};
use crate::lanes::MarkTarget;

const NAME: &str = "nacos";
/// Dubbo's default config group.
pub const GROUP: &str = "dubbo";

/// Where and how to reach Nacos. The password is kept out of `Debug` and logs.
#[derive(Clone, Debug, Default)]
pub struct NacosSettings {
    /// Base address, e.g. `http://nacos:8848`.
    pub address: String,
    /// Namespace id (`tenant`); empty for the public namespace.
    pub namespace: String,
    pub username: Option<String>,
    pub password: Option<SecretString>,
}

/// A Nacos server, logged in to once for the config centre and the instance marks.
pub struct NacosApi {
    settings: NacosSettings,
    http: reqwest::Client,
    token: Mutex<Option<SecretString>>,
}

/// Nacos as a config centre for Dubbo rules.
pub struct NacosCentre {
    api: Arc<NacosApi>,
}

impl NacosCentre {
    pub fn new(api: Arc<NacosApi>) -> Self {
        NacosCentre { api }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Login {
    access_token: String,
}

/// A transport error without the URL (which could carry a credential).
fn transport(e: reqwest::Error) -> String {
    e.without_url().to_string()
}

impl NacosApi {
    pub fn new(settings: NacosSettings) -> Result<Arc<Self>, PublishError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(3))
            .build()
            .map_err(|e| PublishError::redacted(NAME, transport(e), &[]))?;
        let mut settings = settings;
        settings.address = settings.address.trim_end_matches('/').to_owned();
        Ok(Arc::new(NacosApi {
            settings,
            http,
            token: Mutex::new(None),
        }))
    }

    /// The namespace id, as the config API names it (`tenant`) and the naming API does
    /// (`namespaceId`, where the public namespace is `public`).
    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    /// An error with every credential removed from its text.
    pub async fn err(&self, e: impl ToString) -> PublishError {
        let token = self.token.lock().await;
        let password = self
            .settings
            .password
            .as_ref()
            .map(|p| p.expose_secret())
            .unwrap_or_default();
        let token = token.as_ref().map(|t| t.expose_secret()).unwrap_or_default();
        PublishError::redacted(NAME, e, &[password, token])
    }

    /// A request to `path` carrying the access token in a header (never in the URL, which
    /// ends up in error texts and access logs).
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, PublishError> {
        let builder = self
            .http
            .request(method, format!("{}{path}", self.settings.address));
        Ok(match self.token().await? {
            Some(token) => builder.header("accessToken", token.expose_secret()),
            None => builder,
        })
    }

    async fn token(&self) -> Result<Option<SecretString>, PublishError> {
        let (Some(username), Some(password)) = (&self.settings.username, &self.settings.password) else {
            return Ok(None);
        };
        let mut token = self.token.lock().await;
        if let Some(t) = token.as_ref() {
            return Ok(Some(t.clone()));
        }
        let url = format!("{}/nacos/v1/auth/login", self.settings.address);
        let secrets = [password.expose_secret()];
        let response = self
            .http
            .post(url)
            .form(&[
                ("username", username.as_str()),
                ("password", password.expose_secret()),
            ])
            .send()
            .await
            .map_err(|e| PublishError::redacted(NAME, transport(e), &secrets))?;
        let status = response.status();
        if !status.is_success() {
            return Err(PublishError::redacted(
                NAME,
                format!("login as {username} failed: HTTP {status}"),
                &secrets,
            ));
        }
        let login: Login = response
            .json()
            .await
            .map_err(|e| PublishError::redacted(NAME, transport(e), &secrets))?;
        let access = SecretString::from(login.access_token);
        *token = Some(access.clone());
        Ok(Some(access))
    }

    /// Checks an answer; a 401/403 drops the token so the next call logs in again.
    pub async fn expect_ok(&self, response: reqwest::Response, what: &str) -> Result<String, PublishError> {
        let status = response.status();
        let body = match response.text().await {
            Ok(body) => body,
            Err(e) => return Err(self.err(transport(e)).await),
        };
        if !status.is_success() {
            let e = self.err(format!("{what}: HTTP {status}: {}", body.trim())).await;
            if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
                *self.token.lock().await = None;
            }
            return Err(e);
        }
        Ok(body)
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, PublishError> {
        match request.send().await {
            Ok(r) => Ok(r),
            Err(e) => Err(self.err(transport(e)).await),
        }
    }
}

const CONFIGS: &str = "/nacos/v1/cs/configs";

impl NacosCentre {
    /// Query parameters naming the config.
    fn params(&self, key: &str) -> Vec<(&'static str, String)> {
        let mut params = vec![("dataId", key.to_owned()), ("group", GROUP.to_owned())];
        if !self.api.namespace().is_empty() {
            params.push(("tenant", self.api.namespace().to_owned()));
        }
        params
    }
}

impl ConfigCentre for NacosCentre {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Nacos answers reads from a cache it refreshes after a write: measured against Nacos
    /// 3.1, a read right after a publish returned the old content 298 times in 300, for up to
    /// 2.1 s.
    fn settle(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>> {
        async move {
            let request = self
                .api
                .request(reqwest::Method::GET, CONFIGS)
                .await?
                .query(&self.params(key));
            let response = self.api.send(request).await?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            self.api.expect_ok(response, "reading").await.map(Some)
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let mut params = self.params(key);
            params.push(("content", content.to_owned()));
            params.push(("type", "yaml".to_owned()));
            let request = self
                .api
                .request(reqwest::Method::POST, CONFIGS)
                .await?
                .form(&params);
            let response = self.api.send(request).await?;
            let body = self.api.expect_ok(response, "publishing").await?;
            if body.trim() != "true" {
                return Err(self
                    .api
                    .err(format!("publishing: Nacos answered {:?}", body.trim()))
                    .await);
            }
            Ok(())
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let request = self
                .api
                .request(reqwest::Method::DELETE, CONFIGS)
                .await?
                .query(&self.params(key));
            let response = self.api.send(request).await?;
            self.api.expect_ok(response, "deleting").await.map(|_| ())
        }
        .boxed()
    }
}

/// Nacos naming, where the instances laneway marks are registered.
pub struct NacosRegistry {
    api: Arc<NacosApi>,
}

impl NacosRegistry {
    pub fn new(api: Arc<NacosApi>) -> Self {
        NacosRegistry { api }
    }

    /// The naming API's name for the namespace: `public` for the public one.
    fn namespace(&self) -> String {
        match self.api.namespace() {
            "" => "public".to_owned(),
            ns => ns.to_owned(),
        }
    }

    fn service_params(&self, target: &MarkTarget) -> Vec<(&'static str, String)> {
        vec![
            ("serviceName", target.service.clone()),
            ("groupName", target.group.clone()),
            ("namespaceId", self.namespace()),
        ]
    }

    /// One batch call on `instances`: PUT merges `metadata` into each instance's own, DELETE
    /// removes the keys it names (the values are ignored). Both answer which instances they
    /// changed; an instance that is not registered (any more) is skipped, not an error. A
    /// request Nacos cannot read gets an empty 200, taken as a failure.
    async fn batch(
        &self,
        method: reqwest::Method,
        target: &MarkTarget,
        instances: &[Instance],
        metadata: &BTreeMap<String, String>,
    ) -> Result<(), PublishError> {
        // An empty list means every instance of the service to Nacos.
        if instances.is_empty() {
            return Ok(());
        }
        let list: Vec<serde_json::Value> = instances
            .iter()
            .map(|i| serde_json::json!({"ip": i.ip, "port": i.port, "clusterName": i.cluster}))
            .collect();
        let mut params = self.service_params(target);
        params.push(("instances", serde_json::Value::from(list).to_string()));
        params.push(("metadata", serde_json::to_string(metadata).unwrap_or_default()));
        params.push(("consistencyType", "ephemeral".to_owned()));
        let request = self.api.request(method, METADATA).await?.form(&params);
        let response = self.api.send(request).await?;
        let body = self.api.expect_ok(response, "marking instances").await?;
        match serde_json::from_str::<Answer<serde_json::Value>>(&body) {
            Ok(answer) if answer.code == 0 => Ok(()),
            _ => Err(self
                .api
                .err(format!("marking instances: Nacos answered {}", body.trim()))
                .await),
        }
    }
}

const INSTANCES: &str = "/nacos/v3/admin/ns/instance/list";
const METADATA: &str = "/nacos/v3/admin/ns/instance/metadata/batch";

/// The envelope of every Nacos 3 admin answer.
#[derive(Deserialize)]
struct Answer<T> {
    code: i64,
    data: Option<T>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Registered {
    ip: String,
    port: u16,
    #[serde(default)]
    cluster_name: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

impl Registry for NacosRegistry {
    fn instances<'a>(&'a self, target: &'a MarkTarget) -> BoxFuture<'a, Result<Vec<Instance>, PublishError>> {
        async move {
            let request = self
                .api
                .request(reqwest::Method::GET, INSTANCES)
                .await?
                .query(&self.service_params(target));
            let response = self.api.send(request).await?;
            // A service no instance has registered yet.
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(Vec::new());
            }
            let body = self.api.expect_ok(response, "listing instances").await?;
            let answer: Answer<Vec<Registered>> = match serde_json::from_str(&body) {
                Ok(answer) => answer,
                Err(e) => return Err(self.api.err(format!("listing instances: {e}")).await),
            };
            if answer.code != 0 {
                return Err(self
                    .api
                    .err(format!("listing instances: Nacos answered {}", body.trim()))
                    .await);
            }
            Ok(answer
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|r| Instance {
                    ip: r.ip,
                    port: r.port,
                    cluster: r.cluster_name,
                    metadata: r.metadata,
                })
                .collect())
        }
        .boxed()
    }

    fn set<'a>(
        &'a self,
        target: &'a MarkTarget,
        instances: &'a [Instance],
        metadata: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        self.batch(reqwest::Method::PUT, target, instances, metadata)
            .boxed()
    }

    fn remove<'a>(
        &'a self,
        target: &'a MarkTarget,
        instances: &'a [Instance],
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let named = keys.iter().map(|k| (k.clone(), String::new())).collect();
            self.batch(reqwest::Method::DELETE, target, instances, &named)
                .await
        }
        .boxed()
    }
}
