//! Nacos: dataId `<application>.tag-router`, group `dubbo`, through the config OpenAPI
//! (`/nacos/v1/cs/configs`), logging in with a username and password when given.

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Deserialize;
use tokio::sync::Mutex;

use super::{ConfigCentre, PublishError};

const NAME: &str = "nacos";
/// Dubbo's default config group.
pub const GROUP: &str = "dubbo";

/// Where and how to reach Nacos.
#[derive(Clone, Debug, Default)]
pub struct NacosSettings {
    /// Base address, e.g. `http://nacos:8848`.
    pub address: String,
    /// Namespace id (`tenant`); empty for the public namespace.
    pub namespace: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

pub struct NacosCentre {
    settings: NacosSettings,
    http: reqwest::Client,
    token: Mutex<Option<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Login {
    access_token: String,
}

fn err(e: impl ToString) -> PublishError {
    PublishError::new(NAME, e)
}

impl NacosCentre {
    pub fn new(settings: NacosSettings) -> Result<Self, PublishError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .map_err(err)?;
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

    /// Query parameters naming the config, with the access token when logged in.
    async fn params(&self, key: &str) -> Result<Vec<(&'static str, String)>, PublishError> {
        let mut params = vec![("dataId", key.to_owned()), ("group", GROUP.to_owned())];
        if !self.settings.namespace.is_empty() {
            params.push(("tenant", self.settings.namespace.clone()));
        }
        if let Some(token) = self.token().await? {
            params.push(("accessToken", token));
        }
        Ok(params)
    }

    async fn token(&self) -> Result<Option<String>, PublishError> {
        let (Some(username), Some(password)) = (&self.settings.username, &self.settings.password) else {
            return Ok(None);
        };
        let mut token = self.token.lock().await;
        if let Some(t) = token.as_ref() {
            return Ok(Some(t.clone()));
        }
        let url = format!("{}/nacos/v1/auth/login", self.settings.address);
        let response = self
            .http
            .post(url)
            .form(&[("username", username.as_str()), ("password", password.as_str())])
            .send()
            .await
            .map_err(err)?;
        let status = response.status();
        if !status.is_success() {
            return Err(err(format!("login as {username} failed: HTTP {status}")));
        }
        let login: Login = response.json().await.map_err(err)?;
        *token = Some(login.access_token.clone());
        Ok(Some(login.access_token))
    }

    /// Checks an answer; a 401/403 drops the token so the next call logs in again.
    async fn expect_ok(&self, response: reqwest::Response, what: &str) -> Result<String, PublishError> {
        let status = response.status();
        let body = response.text().await.map_err(err)?;
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            *self.token.lock().await = None;
        }
        if !status.is_success() {
            return Err(err(format!("{what}: HTTP {status}: {}", body.trim())));
        }
        Ok(body)
    }
}

impl ConfigCentre for NacosCentre {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>> {
        async move {
            let params = self.params(key).await?;
            let response = self
                .http
                .get(self.url())
                .query(&params)
                .send()
                .await
                .map_err(err)?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            self.expect_ok(response, "reading").await.map(Some)
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let mut params = self.params(key).await?;
            params.push(("content", content.to_owned()));
            params.push(("type", "yaml".to_owned()));
            let response = self
                .http
                .post(self.url())
                .form(&params)
                .send()
                .await
                .map_err(err)?;
            let body = self.expect_ok(response, "publishing").await?;
            if body.trim() != "true" {
                return Err(err(format!("publishing: Nacos answered {:?}", body.trim())));
            }
            Ok(())
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let params = self.params(key).await?;
            let response = self
                .http
                .delete(self.url())
                .query(&params)
                .send()
                .await
                .map_err(err)?;
            self.expect_ok(response, "deleting").await.map(|_| ())
        }
        .boxed()
    }
}
