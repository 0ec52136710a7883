//! A real Nacos server (tests/nacos: a rebuild of Nacos 3.1 from Maven Central) with auth on.

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

    /// The config stored under `data_id` in group `dubbo`, read as a Dubbo client would.
    pub async fn config(&self, data_id: &str) -> Option<String> {
        let http = reqwest::Client::new();
        let login = http
            .post(format!("{}/nacos/v1/auth/login", self.url()))
            .form(&[("username", "nacos"), ("password", NACOS_PASSWORD)])
            .send()
            .await
            .ok()?;
        let token: serde_json::Value = login.json().await.ok()?;
        let token = token["accessToken"].as_str()?.to_owned();
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
