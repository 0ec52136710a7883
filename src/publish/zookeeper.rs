//! ZooKeeper: the rule is the raw YAML of znode `/dubbo/config/dubbo/<application>.tag-router`,
//! where Dubbo's ZooKeeper config centre reads it.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Mutex;
use zookeeper_client as zk;

use super::{ConfigCentre, PublishError};

const NAME: &str = "zookeeper";
/// Dubbo's default config root and group.
pub const ROOT: &str = "/dubbo/config/dubbo";

pub struct ZooKeeperCentre {
    servers: String,
    /// `user:password` for digest authentication.
    digest: Option<String>,
    session: Mutex<Option<zk::Client>>,
}

fn err(e: impl ToString) -> PublishError {
    PublishError::new(NAME, e)
}

impl ZooKeeperCentre {
    pub fn new(servers: &str, digest: Option<String>) -> Self {
        ZooKeeperCentre {
            servers: servers.to_owned(),
            digest,
            session: Mutex::new(None),
        }
    }

    /// The live session, connecting (again) when there is none.
    async fn client(&self) -> Result<zk::Client, PublishError> {
        let mut session = self.session.lock().await;
        if let Some(c) = session.as_ref() {
            return Ok(c.clone());
        }
        let mut connector = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_connection_timeout(Duration::from_secs(3));
        if let Some(digest) = &self.digest {
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        let client = tokio::time::timeout(Duration::from_secs(5), connector.connect(&self.servers))
            .await
            .map_err(|_| err(format!("no answer from {} within 5s", self.servers)))?
            .map_err(err)?;
        *session = Some(client.clone());
        Ok(client)
    }

    /// Forgets a session that can no longer be used, so the next call reconnects.
    async fn check<T>(&self, result: Result<T, zk::Error>) -> Result<T, PublishError> {
        if let Err(e) = &result {
            if matches!(
                e,
                zk::Error::SessionExpired
                    | zk::Error::ClientClosed
                    | zk::Error::ConnectionLoss
                    | zk::Error::NoHosts
                    | zk::Error::Timeout
            ) {
                *self.session.lock().await = None;
            }
        }
        result.map_err(err)
    }

    fn path(key: &str) -> String {
        format!("{ROOT}/{key}")
    }

    fn acls(&self) -> zk::Acls<'static> {
        zk::Acls::anyone_all()
    }

    async fn ensure_parents(&self, client: &zk::Client) -> Result<(), PublishError> {
        let mut path = String::new();
        for part in ROOT.trim_start_matches('/').split('/') {
            path.push('/');
            path.push_str(part);
            let options = zk::CreateMode::Persistent.with_acls(self.acls());
            match client.create(&path, b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return self.check(Err(e)).await,
            }
        }
        Ok(())
    }
}

impl ConfigCentre for ZooKeeperCentre {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>> {
        async move {
            let client = self.client().await?;
            match client.get_data(&Self::path(key)).await {
                Ok((data, _)) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => self.check(Err(e)).await,
            }
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let client = self.client().await?;
            let path = Self::path(key);
            match client.set_data(&path, content.as_bytes(), None).await {
                Ok(_) => Ok(()),
                Err(zk::Error::NoNode) => {
                    self.ensure_parents(&client).await?;
                    let options = zk::CreateMode::Persistent.with_acls(self.acls());
                    match client.create(&path, content.as_bytes(), &options).await {
                        Ok(_) => Ok(()),
                        Err(zk::Error::NodeExists) => {
                            let r = client.set_data(&path, content.as_bytes(), None).await.map(|_| ());
                            self.check(r).await
                        }
                        Err(e) => self.check(Err(e)).await,
                    }
                }
                Err(e) => self.check(Err(e)).await,
            }
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let client = self.client().await?;
            match client.delete(&Self::path(key), None).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => self.check(Err(e)).await,
            }
        }
        .boxed()
    }
}
