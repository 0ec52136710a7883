//! A real Nacos server (tests/nacos: a rebuild of Nacos 3.1 from Maven Central) with auth on.

use std::collections::BTreeMap;
use std::process::Command;

/// The Nacos admin password: distinctive, so that a leak into logs or status is easy to find.
pub const NACOS_PASSWORD: &str = "Lw-pass-7c41e9";

/// A Nacos server with auth on, stopped when dropped.
pub struct Nacos {
    dir: std::path::PathBuf,
    port: u16,
}

impl Nacos {
    pub fn start() -> Nacos {
        assert!(
            std::env::var_os("NACOS_JAR").is_some(),
            "NACOS_JAR is not set: run the tests with `make test` (tests/in-cluster.sh builds Nacos)"
        );
        let dir =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nacos-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let free = |p: u16| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok();
        let port = (20000..30000u16)
            .step_by(7)
            .find(|p| free(*p) && free(p + 1000) && free(p + 1001) && free(p - 1000))
            .expect("free Nacos ports");
        let nacos = Nacos { dir, port };
        nacos.start_again();
        nacos
    }

    /// Starts the server (again) on the same port and data.
    pub fn start_again(&self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nacos/start.sh");
        let out = Command::new(script)
            .args([&self.port.to_string(), &*self.dir.to_string_lossy(), "--auth"])
            .env("NACOS_ADMIN_PASSWORD", NACOS_PASSWORD)
            .output()
            .expect("start Nacos");
        assert!(
            out.status.success(),
            "Nacos did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn stop(&self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nacos/stop.sh");
        let _ = Command::new(script).arg(&self.dir).output();
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn token(&self, http: &reqwest::Client) -> Option<String> {
        let login = http
            .post(format!("{}/nacos/v1/auth/login", self.url()))
            .form(&[("username", "nacos"), ("password", NACOS_PASSWORD)])
            .send()
            .await
            .ok()?;
        let token: serde_json::Value = login.json().await.ok()?;
        Some(token["accessToken"].as_str()?.to_owned())
    }

    /// The metadata of every instance of `service` (group `DEFAULT_GROUP`, public namespace),
    /// by `ip:port`, as the naming admin API lists it; `None` when Nacos does not answer.
    pub async fn instances(&self, service: &str) -> Option<BTreeMap<String, BTreeMap<String, String>>> {
        let http = reqwest::Client::new();
        let token = self.token(&http).await?;
        let answer: serde_json::Value = http
            .get(format!("{}/nacos/v3/admin/ns/instance/list", self.url()))
            .header("accessToken", token)
            .query(&[
                ("serviceName", service),
                ("groupName", "DEFAULT_GROUP"),
                ("namespaceId", "public"),
            ])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let list = answer["data"].as_array()?;
        Some(
            list.iter()
                .map(|i| {
                    let address = format!("{}:{}", i["ip"].as_str().unwrap_or_default(), i["port"]);
                    let metadata = serde_json::from_value(i["metadata"].clone()).unwrap_or_default();
                    (address, metadata)
                })
                .collect(),
        )
    }

    /// Sets metadata on one instance through the admin API, as an operator would by hand.
    pub async fn set_metadata(&self, service: &str, ip: &str, port: u16, metadata: &[(&str, &str)]) {
        let http = reqwest::Client::new();
        let token = self.token(&http).await.expect("Nacos login");
        let metadata: BTreeMap<&str, &str> = metadata.iter().copied().collect();
        let instances = serde_json::json!([{"ip": ip, "port": port, "clusterName": "DEFAULT"}]).to_string();
        let response = http
            .put(format!(
                "{}/nacos/v3/admin/ns/instance/metadata/batch",
                self.url()
            ))
            .header("accessToken", token)
            .form(&[
                ("serviceName", service),
                ("groupName", "DEFAULT_GROUP"),
                ("namespaceId", "public"),
                ("consistencyType", "ephemeral"),
                ("instances", &instances),
                ("metadata", &serde_json::to_string(&metadata).expect("json")),
            ])
            .send()
            .await
            .expect("metadata update");
        assert!(response.status().is_success(), "{:?}", response.text().await);
    }

    /// The config stored under `data_id` in group `dubbo`, read as a Dubbo client would.
    pub async fn config(&self, data_id: &str) -> Option<String> {
        let http = reqwest::Client::new();
        let token = self.token(&http).await?;
        let response = http
            .get(format!("{}/nacos/v1/cs/configs", self.url()))
            .query(&[("dataId", data_id), ("group", "dubbo"), ("accessToken", &token)])
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    }
}

impl Drop for Nacos {
    fn drop(&mut self) {
        self.stop();
    }
}
