//! Message brokers for the message-lane tests: Kafka in KRaft mode (`tests/kafka`,
//! `LANEWAY_KAFKA_JAR`) and a RocketMQ name server and broker (`tests/rocketmq`,
//! `LANEWAY_ROCKETMQ_JAR`), and producers and consumers with laneway's Kafka interceptors or
//! RocketMQ hooks (roles of the Dubbo harness, one JVM per pod).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{expect_line, log_dir, stdout_lines, Peer, ZooKeeper};

/// Which broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Kafka,
    RocketMq,
}

/// A broker on 127.0.0.1 keeping its data in a directory: a Kafka node (broker and controller in
/// one JVM), or a RocketMQ name server and broker.
pub struct Broker {
    pub peer: Peer,
    pub kind: Kind,
    /// Kafka's bootstrap address, or RocketMQ's name server.
    pub address: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port()
}

/// Ports for a RocketMQ name server and broker: `(name server, broker)`, free, below the
/// kernel's ephemeral range (from 32768), so that no outgoing connection takes one in the seconds
/// before the servers bind it (a broker binds its port, port - 2 and, later, its HA port, port + 1).
fn rocketmq_ports() -> (u16, u16) {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos() as usize
        + std::process::id() as usize;
    // blocks of five ports: the name server's, the broker's fast port, one unused, the broker's,
    // its HA port
    let block = (0..2500)
        .map(|i| 20_000 + ((seed + i * 7) % 2500) as u16 * 5)
        .find(|b| (0..5).all(|i| free(b + i)))
        .expect("five free ports below the ephemeral range");
    (block, block + 3)
}

fn harness(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with `make test` (tests/in-cluster.sh builds the brokers)")
    })
}

impl Broker {
    /// Starts `kind` in `dir` with `topics` (`name:partitions`, comma-separated).
    pub fn start(kind: Kind, dir: &Path, topics: &str) -> Broker {
        let (port, flags) = match kind {
            Kind::Kafka => {
                let port = free_port();
                (port, [("--port", port), ("--controller-port", free_port())])
            }
            Kind::RocketMq => {
                let (namesrv, broker) = rocketmq_ports();
                (namesrv, [("--namesrv-port", namesrv), ("--broker-port", broker)])
            }
        };
        let jar = harness(match kind {
            Kind::Kafka => "LANEWAY_KAFKA_JAR",
            Kind::RocketMq => "LANEWAY_ROCKETMQ_JAR",
        });
        let log = std::fs::File::create(log_dir().join(format!("{kind:?}-{port}.log"))).expect("log");
        let mut child = Command::new("java")
            .args(["-Xms64m", "-Xmx512m", "-jar", &jar, "--dir"])
            .arg(dir)
            .args(
                flags
                    .iter()
                    .flat_map(|(flag, port)| [flag.to_string(), port.to_string()]),
            )
            .args(["--topics", topics])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start broker");
        let lines = stdout_lines(&mut child);
        expect_line(&lines, "READY", Duration::from_secs(180));
        Broker {
            peer: Peer {
                child,
                stdin: None,
                lines,
            },
            kind,
            address: format!("127.0.0.1:{port}"),
        }
    }

    /// The harness role `role` (`producer`, `consumer`) for this broker, and its address flag.
    fn role(&self, role: &str) -> (String, &'static str) {
        match self.kind {
            Kind::Kafka => (format!("k{role}"), "--bootstrap"),
            Kind::RocketMq => (format!("r{role}"), "--namesrv"),
        }
    }
}

/// A producer pod (`kproducer`, `rproducer` roles) whose own lane is in its labels file.
pub struct Producer {
    peer: Peer,
}

/// What one `produce` command sent: epoch milliseconds of its first and last record.
#[derive(Debug, serde::Deserialize)]
pub struct Produced {
    pub n: usize,
    pub first: u64,
    pub last: u64,
}

impl Producer {
    pub fn start(name: &str, broker: &Broker, topic: &str, labels: &Path) -> Producer {
        let ((role, flag), labels) = (broker.role("producer"), labels.to_string_lossy());
        let args = [
            &role,
            flag,
            &broker.address,
            "--topic",
            topic,
            "--labels",
            &labels,
        ];
        Producer {
            peer: Peer::start(&format!("{role}-{name}"), &args),
        }
    }

    /// Starts producing `n` records valued `<prefix>-<i>` while serving a request in `lane` (None:
    /// the pod's own lane), `per_second` a second (0: as fast as it can); [`Producer::done`] waits.
    pub fn produce(&mut self, n: usize, lane: Option<&str>, prefix: &str, per_second: usize) {
        let stdin = self.peer.stdin.as_mut().expect("stdin");
        let cmd = format!("produce {n} {} {prefix} {per_second}\n", lane.unwrap_or("-"));
        stdin.write_all(cmd.as_bytes()).expect("produce");
        stdin.flush().expect("flush");
    }

    pub fn done(&mut self, timeout: Duration) -> Produced {
        let line = self.peer.expect_line("{\"cmd\":\"produce\"", timeout);
        serde_json::from_str(&line).expect("produce JSON")
    }
}

/// One record a consumer handled, and the chain its onward Dubbo call went along.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Handled {
    pub h: String,
    pub lane: Option<String>,
    pub by: String,
    pub chain: String,
    pub born: u64,
    pub at: u64,
}

/// A consumer pod (`kconsumer`, `rconsumer` roles) with laneway's libraries by configuration only:
/// its tier from its own lane at start, the ownership document of `app` from ZooKeeper, each
/// record handled by a Dubbo call to `next`.
pub struct MessageConsumer {
    peer: Peer,
}

/// Where a consumer pod reads from and calls.
pub struct ConsumerPod<'a> {
    pub id: &'a str,
    pub app: &'a str,
    pub next: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    pub labels: &'a Path,
}

impl MessageConsumer {
    pub fn start(pod: &ConsumerPod, broker: &Broker, zk: &ZooKeeper) -> MessageConsumer {
        let ((role, flag), zk, labels) = (
            broker.role("consumer"),
            zk.address(),
            pod.labels.to_string_lossy(),
        );
        let args = [
            &role,
            flag,
            &broker.address,
            "--id",
            pod.id,
            "--topic",
            pod.topic,
            "--group",
            pod.group,
            "--zk",
            &zk,
            "--app",
            pod.app,
            "--next",
            pod.next,
            "--labels",
            &labels,
        ];
        MessageConsumer {
            peer: Peer::start(&format!("{role}-{}", pod.id), &args),
        }
    }

    /// The records handled since the last call, until `done` holds of everything collected by
    /// every consumer in `consumers` or `timeout` passes.
    pub fn collect(
        consumers: &[&MessageConsumer],
        into: &mut Vec<Handled>,
        timeout: Duration,
        done: impl Fn(&[Handled]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            for c in consumers {
                while let Ok(line) = c.peer.lines.try_recv() {
                    if line.starts_with("{\"h\"") {
                        into.push(serde_json::from_str(&line).expect("handled JSON"));
                    }
                }
            }
            if done(into) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// What a consumer that handles nothing took to read the whole topic (`kdrain` role): with
/// laneway's interceptor for `tier` and the document in `messages`, or plain.
#[derive(Debug, serde::Deserialize)]
pub struct Drained {
    pub records: u64,
    pub ms: u64,
}

pub fn drain(kafka: &Broker, topic: &str, group: &str, filter: Option<(&str, &Path)>) -> Drained {
    let bootstrap = &kafka.address;
    let mut cmd = Command::new("java");
    cmd.args(["-Xms64m", "-Xmx256m", "-jar", &super::jar(), "kdrain"])
        .args(["--bootstrap", bootstrap, "--topic", topic, "--group", group]);
    if let Some((tier, messages)) = filter {
        cmd.args(["--tier", tier, "--messages"]).arg(messages);
    }
    let out = cmd.output().expect("kdrain");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("{\"cmd\":\"drain\""))
        .unwrap_or_else(|| panic!("kdrain: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_str(line).expect("drain JSON")
}
