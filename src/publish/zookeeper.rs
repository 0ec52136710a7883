//! ZooKeeper: the rule is the raw YAML of znode `/dubbo/config/dubbo/<application>.tag-router`,
//! where Dubbo's ZooKeeper config centre reads it.
//!
//! With digest credentials, laneway's rule znodes (only those: the parent path is shared with
//! Dubbo and its tools) carry an ACL that lets only laneway's identity change them and anyone
//! read them; znodes created earlier without it get it on the next read-back.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::Mutex;
use zookeeper_client as zk;

use super::{ConfigCentre, PublishError};

const NAME: &str = "zookeeper";
/// Longest wait for one operation before the session is given up.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// Dubbo's default config root and group.
pub const ROOT: &str = "/dubbo/config/dubbo";

pub struct ZooKeeperCentre {
    servers: String,
    /// `user:password` for digest authentication.
    digest: Option<SecretString>,
    session: Mutex<Option<zk::Client>>,
}

/// Full rights for the identity that created the node (laneway's digest), reading for anyone.
static PROTECTED: [zk::Acl; 2] = [
    zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
    zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
];

impl ZooKeeperCentre {
    pub fn new(servers: &str, digest: Option<SecretString>) -> Self {
        ZooKeeperCentre {
            servers: servers.to_owned(),
            digest,
            session: Mutex::new(None),
        }
    }

    fn err(&self, e: impl ToString) -> PublishError {
        let secret = self
            .digest
            .as_ref()
            .map(|d| d.expose_secret())
            .unwrap_or_default();
        let password = secret.split_once(':').map(|(_, p)| p).unwrap_or_default();
        PublishError::redacted(NAME, e, &[secret, password])
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
            connector = connector.with_auth("digest", digest.expose_secret().as_bytes());
        }
        let client = tokio::time::timeout(Duration::from_secs(5), connector.connect(&self.servers))
            .await
            .map_err(|_| self.err(format!("no answer from {} within 5s", self.servers)))?
            .map_err(|e| self.err(e))?;
        *session = Some(client.clone());
        Ok(client)
    }

    /// Runs one operation, bounded: a server that does not answer within [`OP_TIMEOUT`] costs
    /// the session, so that the next call connects afresh instead of waiting on a dead one.
    async fn bounded<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, PublishError>>,
    ) -> Result<T, PublishError> {
        match tokio::time::timeout(OP_TIMEOUT, op).await {
            Ok(result) => result,
            Err(_) => {
                *self.session.lock().await = None;
                Err(self.err(format!("no answer from {} within {OP_TIMEOUT:?}", self.servers)))
            }
        }
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
        result.map_err(|e| self.err(e))
    }

    fn path(key: &str) -> String {
        format!("{ROOT}/{key}")
    }

    /// The ACL of laneway's rule znodes.
    fn rule_acls(&self) -> zk::Acls<'static> {
        if self.digest.is_some() {
            zk::Acls::new(&PROTECTED)
        } else {
            zk::Acls::anyone_all()
        }
    }

    async fn ensure_parents(&self, client: &zk::Client) -> Result<(), PublishError> {
        let mut path = String::new();
        for part in ROOT.trim_start_matches('/').split('/') {
            path.push('/');
            path.push_str(part);
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match client.create(&path, b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return self.check(Err(e)).await,
            }
        }
        Ok(())
    }
}

/// Only an authenticated identity may write, and anyone may read (what [`PROTECTED`] becomes
/// once the server has put the creator's digest in place of `auth`).
fn is_protected(acls: &[zk::Acl]) -> bool {
    let world: Vec<&zk::Acl> = acls.iter().filter(|a| a.scheme() == "world").collect();
    let world_read_only = world.len() == 1 && world[0].permission() == zk::Permission::READ;
    let owner = acls
        .iter()
        .any(|a| a.scheme() == "digest" && a.permission() == zk::Permission::ALL);
    world_read_only && owner
}

impl ConfigCentre for ZooKeeperCentre {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>> {
        async move {
            self.bounded(async move {
                let client = self.client().await?;
                match client.get_data(&Self::path(key)).await {
                    Ok((data, _)) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => self.check(Err(e)).await,
                }
            })
            .await
        }
        .boxed()
    }

    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            self.bounded(async move {
                let client = self.client().await?;
                let path = Self::path(key);
                match client.set_data(&path, content.as_bytes(), None).await {
                    Ok(_) => Ok(()),
                    Err(zk::Error::NoNode) => {
                        self.ensure_parents(&client).await?;
                        let options = zk::CreateMode::Persistent.with_acls(self.rule_acls());
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
            })
            .await
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            self.bounded(async move {
                let client = self.client().await?;
                match client.delete(&Self::path(key), None).await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => self.check(Err(e)).await,
                }
            })
            .await
        }
        .boxed()
    }

    fn protect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, PublishError>> {
        async move {
            self.bounded(async move {
                if self.digest.is_none() {
                    return Ok(false);
                }
                let client = self.client().await?;
                let path = Self::path(key);
                let acls = match client.get_acl(&path).await {
                    Ok((acls, _)) => acls,
                    Err(zk::Error::NoNode) => return Ok(false),
                    Err(e) => return self.check(Err(e)).await,
                };
                if is_protected(&acls) {
                    return Ok(false);
                }
                let r = client.set_acl(&path, &PROTECTED, None).await.map(|_| true);
                self.check(r).await
            })
            .await
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_znodes_are_not_protected() {
        assert!(!is_protected(&zk::Acls::anyone_all()));
        let digest = zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", "laneway:x"));
        let read = zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone());
        assert!(is_protected(&[digest.clone(), read]));
        let write = zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone());
        assert!(!is_protected(&[digest, write]));
    }
}
