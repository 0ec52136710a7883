//! Self-test of the fault-injection support in `tests/faults`: the proxy against plain TCP, the
//! audit reader and leadership check on their own, and everything against a private control
//! plane (envtest with an audit log and one identity per replica).

mod cluster;
mod faults;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use faults::audit::{self, LeaseCheck, Problem, Record};
use faults::{ControlPlane, Proxy, CHECKER};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::time::timeout;

const AUDIT_WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The proxy, against plain TCP servers.

/// A TCP server answering every chunk with `f(chunk)`; counts the bytes it received.
fn tcp_server(f: fn(&[u8]) -> Vec<u8>) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    counter.fetch_add(n as u64, Ordering::SeqCst);
                    if conn.write_all(&f(&buf[..n])).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, received)
}

/// What a client sees when it waits for an answer.
#[derive(Debug, PartialEq)]
enum Seen {
    Data(Vec<u8>),
    Nothing,
    Eof,
    Reset,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(400))).unwrap();
    s
}

fn ask(s: &mut TcpStream, msg: &[u8]) -> Seen {
    if let Err(e) = s.write_all(msg) {
        return if e.kind() == ErrorKind::BrokenPipe || e.kind() == ErrorKind::ConnectionReset {
            Seen::Reset
        } else {
            panic!("write: {e}")
        };
    }
    listen(s)
}

fn listen(s: &mut TcpStream) -> Seen {
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => Seen::Eof,
        Ok(n) => Seen::Data(buf[..n].to_vec()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Seen::Nothing,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Seen::Reset,
        Err(e) => panic!("read: {e}"),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("join")
}

/// [`ask`] on a blocking thread; the connection comes back with the answer.
async fn ask_off_runtime(mut s: TcpStream, msg: &'static [u8]) -> (TcpStream, Seen) {
    blocking(move || {
        let seen = ask(&mut s, msg);
        (s, seen)
    })
    .await
}

/// A new connection to `addr` that has had `msg` echoed back.
async fn echoed(addr: SocketAddr, msg: &'static [u8]) -> TcpStream {
    let (s, seen) = ask_off_runtime(connect(addr), msg).await;
    assert_eq!(seen, Seen::Data(msg.to_vec()));
    s
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_cuts_partitions_and_heals_plain_tcp() {
    let (echo, _) = tcp_server(|b| b.to_vec());
    let (upper, upper_received) = tcp_server(|b| b.to_ascii_uppercase());
    let proxy = Proxy::start(echo);
    let addr = proxy.addr();

    let mut c1 = echoed(addr, b"hello").await;

    // Partition: the open connection goes silent (no data, no close); a new one is accepted
    // but never reaches the server.
    proxy.partition(true);
    settle().await;
    let (mut c1, mut c2, seen1, seen2) = blocking(move || {
        let seen1 = ask(&mut c1, b"anyone?");
        let mut c2 = connect(addr);
        let seen2 = ask(&mut c2, b"hello?");
        (c1, c2, seen1, seen2)
    })
    .await;
    assert_eq!((seen1, seen2), (Seen::Nothing, Seen::Nothing));
    let stats = proxy.stats();
    assert_eq!(
        (stats.accepted, stats.connected_upstream, stats.held, stats.open),
        (2, 1, 2, 2)
    );

    // Healing closes the held connections; new ones work.
    proxy.partition(false);
    settle().await;
    let (seen1, seen2, seen3) = blocking(move || {
        let mut c3 = connect(addr);
        (listen(&mut c1), listen(&mut c2), ask(&mut c3, b"again"))
    })
    .await;
    assert!(matches!(seen1, Seen::Eof | Seen::Reset), "{seen1:?}");
    assert!(matches!(seen2, Seen::Eof | Seen::Reset), "{seen2:?}");
    assert_eq!(seen3, Seen::Data(b"again".to_vec()));

    // Cut: every open connection is reset; a new one works.
    let mut c4 = echoed(addr, b"before").await;
    proxy.cut();
    settle().await;
    let (seen4, seen5) = blocking(move || {
        let mut c5 = connect(addr);
        (listen(&mut c4), ask(&mut c5, b"after"))
    })
    .await;
    assert_eq!(seen4, Seen::Reset);
    assert_eq!(seen5, Seen::Data(b"after".to_vec()));
    assert!(proxy.stats().cut >= 1);

    // A new upstream for new connections; open ones stay where they are.
    let mut old = echoed(addr, b"first").await;
    proxy.set_upstream(upper);
    let (new, seen_old, seen_new) = blocking(move || {
        let mut new = connect(addr);
        (
            new.try_clone().unwrap(),
            ask(&mut old, b"old"),
            ask(&mut new, b"new"),
        )
    })
    .await;
    assert_eq!(seen_old, Seen::Data(b"old".to_vec()));
    assert_eq!(seen_new, Seen::Data(b"NEW".to_vec()));

    // Responses dropped: the request reaches the server, the answer never comes back.
    proxy.drop_responses(true);
    settle().await;
    let before = upper_received.load(Ordering::SeqCst);
    let (mut new, seen) = ask_off_runtime(new, b"lost").await;
    assert_eq!(seen, Seen::Nothing);
    assert_eq!(upper_received.load(Ordering::SeqCst), before + 4);
    proxy.drop_responses(false);
    settle().await;
    let seen = blocking(move || listen(&mut new)).await;
    assert!(matches!(seen, Seen::Eof | Seen::Reset), "{seen:?}");

    // Dropping the proxy closes what is open and the listener.
    let mut last = connect(addr);
    let stats = proxy.stats();
    assert!(stats.bytes_up > 0 && stats.bytes_down > 0, "{stats:?}");
    drop(proxy);
    settle().await;
    let seen = blocking(move || listen(&mut last)).await;
    assert!(matches!(seen, Seen::Eof | Seen::Reset), "{seen:?}");
    assert!(
        TcpStream::connect(addr).is_err(),
        "the listener outlived the proxy"
    );
}

// ---------------------------------------------------------------------------------------------
// The audit reader and the leadership check on their own.

fn line(user: &str, verb: &str, resource: &str, name: &str, code: u16, received: &str, done: &str) -> String {
    json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "x",
        "stage": "ResponseComplete", "requestURI": "/", "verb": verb,
        "user": {"username": user, "groups": ["system:masters"]},
        "objectRef": {"resource": resource, "namespace": "ns", "name": name, "apiGroup": "", "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": received, "stageTimestamp": done,
    })
    .to_string()
}

fn t(s: u32) -> String {
    format!("2025-01-01T00:00:{s:02}.000000Z")
}

#[test]
fn audit_reader_skips_a_partial_last_line() {
    let full = line("laneway-a", "create", "configmaps", "one", 201, &t(1), &t(2));
    let text = format!("{full}\n{}", &full[..full.len() / 2]);
    let records = audit::parse(&text).expect("parse");
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (
            r.user.as_str(),
            r.verb.as_str(),
            r.resource.as_str(),
            r.namespace.as_str(),
            r.name.as_str()
        ),
        ("laneway-a", "create", "configmaps", "ns", "one")
    );
    assert_eq!(r.code, Some(201));
    assert_eq!(r.received, t(1).parse::<Timestamp>().unwrap());
    assert_eq!(r.latency().as_secs(), 1);
    // A broken line that is not the last one is an error.
    assert!(audit::parse(&format!("{{oops\n{full}\n")).is_err());

    // The tail reader returns each complete line once.
    let path = std::env::temp_dir().join(format!("faults-tail-{}.log", std::process::id()));
    std::fs::write(&path, text.as_bytes()).unwrap();
    let mut tail = audit::Tail::new(&path);
    assert_eq!(tail.poll().unwrap().len(), 1);
    assert_eq!(tail.poll().unwrap().len(), 0);
    std::fs::write(&path, format!("{full}\n{full}\n{full}\n")).unwrap();
    assert_eq!(tail.poll().unwrap().len(), 2);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn leadership_check_on_synthetic_records() {
    let lease = |user: &str, code, r, c| line(user, "update", "leases", "leader", code, &t(r), &t(c));
    let write = |user: &str, name: &str, r, c| line(user, "patch", "configmaps", name, 200, &t(r), &t(c));
    let lines = [
        lease("laneway-a", 201, 0, 0),
        write("laneway-a", "ok", 1, 1),
        lease("laneway-b", 409, 2, 2), // a failed takeover changes nothing
        lease("laneway-a", 200, 3, 3),
        write("laneway-a", "ok", 4, 4),
        write("laneway-a", "stale", 6, 6), // 3s after the renewal received at 3
        write("laneway-c", "never", 7, 7),
        write("checker", "ignored", 7, 7),
        write("laneway-a", "slow", 8, 12), // completes after b's takeover
        lease("laneway-b", 200, 10, 10),
        write("laneway-b", "ok", 11, 11),
    ]
    .join("\n")
        + "\n";
    let records = audit::parse(&lines).unwrap();
    let check = LeaseCheck::new("ns", "leader", Duration::from_secs(2), Duration::from_millis(500));
    let v = check.violations(&records);
    let found: Vec<(&str, &str, usize)> = v
        .iter()
        .map(|v| (v.write.user.as_str(), v.write.name.as_str(), v.problems.len()))
        .collect();
    assert_eq!(
        found,
        [
            ("laneway-a", "stale", 1),
            ("laneway-c", "never", 1),
            ("laneway-a", "slow", 2)
        ],
        "{v:#?}"
    );
    assert_eq!(v[1].problems, [Problem::NeverHeld]);
    assert!(matches!(v[2].problems[1], Problem::TwoWriters { ref holder, .. } if holder == "laneway-b"));
    let holders: Vec<String> = audit::timeline(&records, "ns", "leader")
        .into_iter()
        .map(|t| t.holder)
        .collect();
    assert_eq!(holders, ["laneway-a", "laneway-b"]);
}

#[test]
fn leadership_check_reads_the_holder_from_the_lease_body() {
    // The Lease names the replica by its --identity (`pod-a`), not by its user.
    let mut renewal: serde_json::Value = serde_json::from_str(&line(
        "laneway-a",
        "update",
        "leases",
        "leader",
        200,
        &t(0),
        &t(0),
    ))
    .unwrap();
    renewal["level"] = json!("Request");
    renewal["requestObject"] = json!({"kind": "Lease", "spec": {"holderIdentity": "pod-a"}});
    let text = format!(
        "{renewal}\n{}\n",
        line("laneway-a", "patch", "configmaps", "x", 200, &t(1), &t(1))
    );
    let records = audit::parse(&text).unwrap();
    assert_eq!(records[0].lease_holder.as_deref(), Some("pod-a"));
    let mut check = LeaseCheck::new("ns", "leader", Duration::from_secs(2), Duration::ZERO);
    let v = check.violations(&records);
    assert_eq!(v.len(), 1);
    assert_eq!(
        v[0].problems,
        [Problem::NotHolder {
            holder: "pod-a".into()
        }]
    );
    check.holder_names.insert("laneway-a".into(), "pod-a".into());
    assert!(check.violations(&records).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Against a real control plane.

async fn create_namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("k".to_owned(), name.to_owned())].into()),
        ..Default::default()
    }
}

fn find<'a>(records: &'a [Record], verb: &str, resource: &str, name: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.verb == verb && r.resource == resource && r.name == name)
        .collect()
}

async fn wait_for_write(cp: &ControlPlane, verb: &str, resource: &str, name: &str) -> Record {
    let records = audit::wait_for(&cp.audit_log_path(), AUDIT_WAIT, |rs| {
        !find(rs, verb, resource, name).is_empty()
    })
    .await;
    let found = find(&records, verb, resource, name);
    assert_eq!(found.len(), 1, "{verb} {resource} {name}: {found:#?}");
    found[0].clone()
}

/// The first request after `fault`: it must succeed within 10 s.
async fn first_get_after(fault: &str, cms: &Api<ConfigMap>) {
    let got = timeout(Duration::from_secs(10), cms.get("one"))
        .await
        .unwrap_or_else(|_| panic!("get after {fault}: timed out"));
    eprintln!("first request after {fault}: {:?}", got.as_ref().map(|_| "ok"));
    got.unwrap_or_else(|e| panic!("get after {fault}: {e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_faults_against_a_real_control_plane() {
    let mut cp = ControlPlane::start().await;
    let proxy = Proxy::start(cp.addr());
    let a = cp.client_via("laneway-a", &proxy.url()).await;
    let ns = "faults-selftest";
    create_namespace(&a, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(a.clone(), ns);
    cms.create(&PostParams::default(), &config_map("one"))
        .await
        .expect("create");

    let r = wait_for_write(&cp, "create", "configmaps", "one").await;
    assert_eq!(
        (r.user.as_str(), r.namespace.as_str(), r.code),
        ("laneway-a", ns, Some(201))
    );
    let r = wait_for_write(&cp, "create", "namespaces", ns).await;
    assert_eq!((r.user.as_str(), r.namespace.as_str()), ("laneway-a", ""));
    let stats = proxy.stats();
    assert!(
        stats.connected_upstream >= 1 && stats.bytes_up > 0 && stats.bytes_down > 0,
        "{stats:?}"
    );
    eprintln!("after the first writes: {stats:?}");

    // Cut: the pooled connection is reset; the next request opens a new one.
    proxy.cut();
    settle().await;
    first_get_after("cut", &cms).await;
    assert!(proxy.stats().cut >= 1, "{:?}", proxy.stats());

    // Partition: requests hang (open and new connections alike); healing makes them work.
    proxy.partition(true);
    let hung = timeout(
        Duration::from_secs(2),
        cms.create(&PostParams::default(), &config_map("two")),
    )
    .await;
    assert!(hung.is_err(), "a request went through the partition: {hung:?}");
    let fresh = cp.client_via("laneway-a", &proxy.url()).await;
    let hung = timeout(
        Duration::from_secs(2),
        Api::<ConfigMap>::namespaced(fresh, ns).get("one"),
    )
    .await;
    assert!(hung.is_err(), "a new connection went through the partition");
    eprintln!("during the partition: {:?}", proxy.stats());
    assert!(proxy.stats().held >= 2, "{:?}", proxy.stats());
    proxy.partition(false);
    first_get_after("heal", &cms).await;
    assert_eq!(proxy.stats().held, 0);

    // Responses dropped: the client times out, but the server did the write, under its user.
    proxy.drop_responses(true);
    let lost = timeout(
        Duration::from_secs(2),
        cms.create(&PostParams::default(), &config_map("three")),
    )
    .await;
    assert!(lost.is_err(), "a response came back: {lost:?}");
    let r = wait_for_write(&cp, "create", "configmaps", "three").await;
    assert_eq!((r.user.as_str(), r.code), ("laneway-a", Some(201)));
    proxy.drop_responses(false);
    cms.get("three").await.expect("the timed-out create happened");

    // The write held by the partition never reached the server.
    let records = cp.audit();
    assert!(
        find(&records, "create", "configmaps", "two").is_empty(),
        "{records:#?}"
    );
    assert!(cms.get_opt("two").await.expect("get").is_none());
    // Besides the apiserver's own bootstrap writes (system:apiserver), only laneway-a wrote.
    let users = audit::users(&records);
    assert!(
        users.iter().all(|u| u == "laneway-a" || u.starts_with("system:")),
        "{users:?}"
    );

    // Restart the control plane: same port, same data, the same proxy and client still work.
    let server = cp.server_url().to_owned();
    cp.restart().await;
    assert_eq!(cp.server_url(), server);
    let got = timeout(Duration::from_secs(10), cms.get("one"))
        .await
        .expect("get after restart");
    eprintln!("first request after restart: {:?}", got.as_ref().map(|_| "ok"));
    let cm = got.expect("get after restart");
    assert_eq!(cm.data.unwrap()["k"], "one");
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "patched"}})),
    )
    .await
    .expect("patch after restart");
    let r = wait_for_write(&cp, "patch", "configmaps", "one").await;
    assert_eq!((r.user.as_str(), r.code), ("laneway-a", Some(200)));
    // The log kept the records from before the restart.
    assert_eq!(find(&cp.audit(), "create", "configmaps", "one").len(), 1);
    eprintln!("end: {:?}", proxy.stats());
}

fn lease(holder: Option<&str>, resource_version: Option<String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("leader".into()),
            resource_version,
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(2),
            renew_time: holder.map(|_| MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    }
}

/// Writes the Lease as the client's identity (create, or replace with the resourceVersion read).
async fn write_lease(client: &Client, ns: &str, holder: Option<&str>) {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    match api.get_opt("leader").await.expect("get lease") {
        None => api.create(&PostParams::default(), &lease(holder, None)).await,
        Some(old) => {
            api.replace(
                "leader",
                &PostParams::default(),
                &lease(holder, old.metadata.resource_version),
            )
            .await
        }
    }
    .expect("write lease");
}

async fn write_cm(client: &Client, ns: &str, name: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config_map(name))
        .await
        .expect("create configmap");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_proxy_holds_each_chunk_both_ways_until_it_is_fast_again() {
    let (echo, _) = tcp_server(|b| b.to_vec());
    let proxy = Proxy::start(echo);
    let c = echoed(proxy.addr(), b"before").await;
    proxy.delay(Duration::from_millis(150));
    let started = std::time::Instant::now();
    let (c, seen) = ask_off_runtime(c, b"slow").await;
    assert_eq!(seen, Seen::Data(b"slow".to_vec()));
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    proxy.delay(Duration::ZERO);
    let (_, seen) = ask_off_runtime(c, b"after").await;
    assert_eq!(seen, Seen::Data(b"after".to_vec()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_resuming_behind_an_etcd_compaction_is_gone() {
    // ConfigMaps watched from etcd itself, as the fault suite does with pods.
    let identities = [CHECKER];
    let cp = ControlPlane::start_with(&identities, &["--watch-cache-sizes=configmaps#0"]).await;
    let client = cp.client_for(CHECKER).await;
    let ns = "compaction-selftest";
    create_namespace(&client, ns).await;
    write_cm(&client, ns, "first").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let behind = api
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("version");
    // Two writes: etcd keeps the revision it was compacted at, so a watch resuming just
    // before it would still be served.
    write_cm(&client, ns, "second").await;
    write_cm(&client, ns, "third").await;
    let revision = cp.compact_etcd().await;
    assert!(revision > behind.parse::<i64>().expect("version") + 1);
    let mut events = Box::pin(api.watch(&Default::default(), &behind).await.expect("watch"));
    let first = timeout(Duration::from_secs(10), futures::StreamExt::next(&mut events)).await;
    match first {
        Ok(Some(Ok(kube::api::WatchEvent::Error(e)))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn leadership_violations_from_a_real_audit_log() {
    let cp = ControlPlane::start().await;
    let checker = cp.client_for(CHECKER).await;
    let a = cp.client_for("laneway-a").await;
    let b = cp.client_for("laneway-b").await;
    let ns = "lease-selftest";
    create_namespace(&checker, ns).await;
    let deadline = Duration::from_millis(1000);
    let margin = Duration::from_millis(200);

    write_lease(&a, ns, Some("laneway-a")).await;
    write_cm(&a, ns, "a-1").await;
    write_lease(&a, ns, Some("laneway-a")).await;
    write_cm(&a, ns, "a-2").await;
    write_cm(&checker, ns, "checker-1").await;
    // a stops renewing, and writes once more past its deadline.
    tokio::time::sleep(deadline + margin + Duration::from_millis(300)).await;
    write_cm(&a, ns, "a-late").await;
    // b takes over and writes: fine.
    write_lease(&b, ns, Some("laneway-b")).await;
    write_cm(&b, ns, "b-1").await;

    let records = audit::wait_for(&cp.audit_log_path(), AUDIT_WAIT, |rs| {
        !find(rs, "create", "configmaps", "b-1").is_empty()
    })
    .await;
    let v = audit::violations(&records, ns, "leader", deadline, margin);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(
        (v[0].write.user.as_str(), v[0].write.name.as_str()),
        ("laneway-a", "a-late")
    );
    assert!(matches!(v[0].problems[..], [Problem::Stale { .. }]), "{v:#?}");
    eprintln!("violation: {}", v[0]);
    let holders: Vec<String> = audit::timeline(&records, ns, "leader")
        .into_iter()
        .map(|t| t.holder)
        .collect();
    assert_eq!(holders, ["laneway-a", "laneway-b"]);
    let lease_writes = audit::lease_writes(&records, ns, "leader");
    assert_eq!(lease_writes.len(), 3);
    assert_eq!(lease_writes[0].record.verb, "create");
    assert_eq!(lease_writes[1].record.verb, "update");

    // a writes after b took the Lease: stale and two writers. b releases, then writes: not
    // the holder any more.
    write_cm(&a, ns, "a-after-b").await;
    write_lease(&b, ns, None).await;
    write_cm(&b, ns, "b-after-release").await;
    let records = audit::wait_for(&cp.audit_log_path(), AUDIT_WAIT, |rs| {
        !find(rs, "create", "configmaps", "b-after-release").is_empty()
    })
    .await;
    let v = audit::violations(&records, ns, "leader", deadline, margin);
    let found: Vec<(&str, &[Problem])> = v
        .iter()
        .map(|v| (v.write.name.as_str(), &v.problems[..]))
        .collect();
    assert_eq!(found.len(), 3, "{v:#?}");
    assert_eq!(found[0].0, "a-late");
    assert_eq!(found[1].0, "a-after-b");
    assert!(
        matches!(found[1].1, [Problem::Stale { .. }, Problem::TwoWriters { holder, .. }] if holder == "laneway-b")
    );
    assert_eq!(
        (found[2].0, found[2].1),
        (
            "b-after-release",
            &[Problem::NotHolder {
                holder: String::new()
            }][..]
        )
    );
    for v in &v {
        eprintln!("violation: {v}");
    }
}
