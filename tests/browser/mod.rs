//! A headless Chromium from Debian (`chromium`, driven over WebDriver by `chromedriver`, from
//! the package `chromium-driver`; tests/in-cluster.sh installs both), for checks that need a
//! real browser: cookies, sub-resources, redirects. Every host name resolves to 127.0.0.1,
//! where the tests' gateway listens. One browser per test binary: start it once.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A browser session: one Chromium with its own empty profile, until dropped.
pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    base: String,
    _profile: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session. Panics (never skips) when either
    /// is missing or does not start.
    pub async fn start() -> Browser {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: apt-get install chromium chromium-driver (tests/in-cluster.sh does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = std::env::temp_dir().join(format!("laneway-chromium-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&profile).expect("profile dir");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--no-proxy-server",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * 127.0.0.1",
            "--window-size=1280,720",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session answer");
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("Chromium did not start: {answer}"))
            .to_owned();
        Browser {
            driver,
            http,
            session,
            base,
            _profile: TempDir(profile),
        }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value = self
            .http
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("WebDriver command")
            .json()
            .await
            .expect("WebDriver answer");
        assert!(answer["value"]["error"].is_null(), "WebDriver {path}: {answer}");
        answer["value"].clone()
    }

    /// Opens `url` and waits for the page to load.
    pub async fn open(&self, url: &str) {
        self.command("url", json!({"url": url})).await;
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.command("execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// A PNG of what the window shows.
    pub async fn screenshot(&self) -> Vec<u8> {
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let answer: Value = self
            .http
            .get(url)
            .send()
            .await
            .expect("screenshot")
            .json()
            .await
            .expect("answer");
        let encoded = answer["value"]
            .as_str()
            .unwrap_or_else(|| panic!("screenshot: {answer}"));
        let mut decode = Command::new("base64")
            .arg("--decode")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("base64");
        use std::io::Write;
        decode
            .stdin
            .take()
            .expect("stdin")
            .write_all(encoded.as_bytes())
            .expect("write");
        decode.wait_with_output().expect("base64 output").stdout
    }

    /// The page's URL.
    pub async fn url(&self) -> String {
        self.eval("return location.href")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Evaluates `script` until `done` accepts its value (at most 30 s).
    pub async fn wait_for(&self, what: &str, script: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let value = self.eval(script).await;
            if done(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: last {value}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // chromedriver's Chromium children outlive it unless told otherwise.
        let _ = Command::new("pkill")
            .args([
                "-f",
                "--",
                &format!("--user-data-dir={}", self._profile.0.display()),
            ])
            .status();
    }
}
