//! Nacos: dataId `<application>.tag-router`, group `dubbo`, through the config OpenAPI
//! (`/nacos/v1/cs/configs`), logging in with a username and password when given.

use futures::future::BoxFuture;
use futures::FutureExt;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::time::Duration;
use tokio::sync::Mutex;

use super::{ConfigCentre, PublishError};

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

pub struct NacosCentre {
    settings: NacosSettings,
    http: reqwest::Client,
    token: Mutex<Option<SecretString>>,
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

impl NacosCentre {
    pub fn new(settings: NacosSettings) -> Result<Self, PublishError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(3))
            .build()
            .map_err(|e| PublishError::redacted(NAME, transport(e), &[]))?;
        let mut settings = settings;
        settings.address = settings.address.trim_end_matches('/').to_owned();
        Ok(NacosCentre {
            settings,
            http,
            token: Mutex::new(None),
        })
    }

    fn url(&self) -> String {
        format!("{}/nacos/v1/cs/configs", self.settings.address)
    }

    /// An error with every credential removed from its text.
    async fn err(&self, e: impl ToString) -> PublishError {
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

    /// Query parameters naming the config.
    fn params(&self, key: &str) -> Vec<(&'static str, String)> {
        let mut params = vec![("dataId", key.to_owned()), ("group", GROUP.to_owned())];
        if !self.settings.namespace.is_empty() {
            params.push(("tenant", self.settings.namespace.clone()));
        }
        params
    }

    /// A request carrying the access token in a header (never in the URL, which ends up in
    /// error texts and access logs).
    async fn request(&self, method: reqwest::Method) -> Result<reqwest::RequestBuilder, PublishError> {
        let builder = self.http.request(method, self.url());
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
    async fn expect_ok(&self, response: reqwest::Response, what: &str) -> Result<String, PublishError> {
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

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, PublishError> {
        match request.send().await {
            Ok(r) => Ok(r),
            Err(e) => Err(self.err(transport(e)).await),
        }
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
            let request = self.request(reqwest::Method::GET).await?.query(&self.params(key));
            let response = self.send(request).await?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            self.expect_ok(response, "reading").await.map(Some)
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let mut params = self.params(key);
            params.push(("content", content.to_owned()));
            params.push(("type", "yaml".to_owned()));
            let request = self.request(reqwest::Method::POST).await?.form(&params);
            let response = self.send(request).await?;
            let body = self.expect_ok(response, "publishing").await?;
            if body.trim() != "true" {
                return Err(self
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
                .request(reqwest::Method::DELETE)
                .await?
                .query(&self.params(key));
            let response = self.send(request).await?;
            self.expect_ok(response, "deleting").await.map(|_| ())
        }
        .boxed()
    }
}
