//! The kube-apiserver audit log (JSON lines, `audit.k8s.io/v1` events) and what it says about
//! leadership: which replica wrote when, relative to its Lease.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// The verbs that change state (the ones the audit policy records).
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// One audit event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub audit_id: String,
    /// `ResponseComplete` (or `Panic`) with the policy used here.
    pub stage: String,
    /// The authenticated user (the token's user, e.g. `laneway-a`).
    pub user: String,
    /// The user acted as, when the request impersonated one.
    pub impersonated: Option<String>,
    pub user_agent: String,
    pub verb: String,
    pub uri: String,
    pub api_group: String,
    pub resource: String,
    /// `status`, `scale`, ... or empty.
    pub subresource: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// The object's name (filled in for creates too).
    pub name: String,
    /// The HTTP status the server answered (whether or not the client got it).
    pub code: Option<u16>,
    /// `requestReceivedTimestamp`.
    pub received: Timestamp,
    /// `stageTimestamp`: when the response was complete.
    pub completed: Timestamp,
    /// For Lease writes logged with their body: the `spec.holderIdentity` the request sets
    /// (`Some("")` when it clears it, i.e. a release). `None` when the body is not logged or does
    /// not set it.
    pub lease_holder: Option<String>,
}

impl Record {
    pub fn succeeded(&self) -> bool {
        self.code.is_some_and(|c| (200..300).contains(&c))
    }

    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }

    /// The last stage of a request (`ResponseComplete`, or `Panic`).
    pub fn is_final(&self) -> bool {
        self.stage == "ResponseComplete" || self.stage == "Panic"
    }

    pub fn is_object(&self, resource: &str, namespace: &str, name: &str) -> bool {
        self.resource == resource && self.namespace == namespace && self.name == name
    }

    /// How long the server took.
    pub fn latency(&self) -> SignedDuration {
        self.completed.duration_since(self.received)
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sub = if self.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", self.subresource)
        };
        let code = self.code.map_or("-".to_owned(), |c| c.to_string());
        let group = if self.api_group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.api_group)
        };
        write!(
            f,
            "{} {} {}{group}{sub} {}/{} -> {code} (received {}, completed {})",
            self.user, self.verb, self.resource, self.namespace, self.name, self.received, self.completed
        )
    }
}

/// Parses one audit event.
pub fn parse_line(line: &str) -> Result<Record, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let time = |key: &str| -> Result<Timestamp, String> {
        v[key]
            .as_str()
            .ok_or_else(|| format!("no {key}"))?
            .parse::<Timestamp>()
            .map_err(|e| format!("{key}: {e}"))
    };
    let object = &v["objectRef"];
    let resource = s(&object["resource"]);
    let verb = s(&v["verb"]);
    let lease_holder = if resource == "leases" && v.get("requestObject").is_some() {
        let spec = &v["requestObject"]["spec"];
        match spec.get("holderIdentity") {
            Some(Value::String(h)) => Some(h.clone()),
            Some(Value::Null) => Some(String::new()),
            // A full object (create/update) without a holder is a cleared Lease.
            None if spec.is_object() && verb != "patch" => Some(String::new()),
            _ => None,
        }
    } else {
        None
    };
    Ok(Record {
        audit_id: s(&v["auditID"]),
        stage: s(&v["stage"]),
        user: s(&v["user"]["username"]),
        impersonated: v["impersonatedUser"]["username"].as_str().map(str::to_owned),
        user_agent: s(&v["userAgent"]),
        verb,
        uri: s(&v["requestURI"]),
        api_group: s(&object["apiGroup"]),
        resource,
        subresource: s(&object["subresource"]),
        namespace: s(&object["namespace"]),
        name: s(&object["name"]),
        code: v["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok()),
        received: time("requestReceivedTimestamp")?,
        completed: time("stageTimestamp")?,
        lease_holder,
    })
}

/// Parses a whole log. A last line without its newline is being written: it is left out.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(l).map_err(|e| format!("audit log line {}: {e}", i + 1)))
        .collect()
}

/// Every complete record in the log at `path` (none when it does not exist yet).
pub fn read(path: &Path) -> io::Result<Vec<Record>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a growing log incrementally: each `poll` returns the records completed since the last.
pub struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    pub fn new(path: impl Into<PathBuf>) -> Tail {
        Tail {
            path: path.into(),
            offset: 0,
        }
    }

    /// Starts at the current end of the log: only later records are returned.
    pub fn from_end(path: impl Into<PathBuf>) -> Tail {
        let path = path.into();
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Tail { path, offset }
    }

    pub fn poll(&mut self) -> io::Result<Vec<Record>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        file.seek(io::SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        let text =
            std::str::from_utf8(&bytes[..=end]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let records = parse(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.offset += end as u64 + 1;
        Ok(records)
    }
}

/// Polls the log until `done` holds for the records read so far (all of them), or `timeout`;
/// returns the records either way. The record of a request can appear a moment after its
/// response reached the client.
pub async fn wait_for(path: &Path, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> Vec<Record> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let records = read(path).expect("audit log");
        if done(&records) || tokio::time::Instant::now() >= deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A successful write of the Lease, and the holder it left in place: the holder the request
/// body set when it is logged, else the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseWrite {
    pub record: Record,
    /// Empty when the write released the Lease.
    pub holder: String,
}

/// Successful writes of the Lease `namespace/name`, in order of completion.
pub fn lease_writes(records: &[Record], namespace: &str, name: &str) -> Vec<LeaseWrite> {
    let mut writes: Vec<LeaseWrite> = records
        .iter()
        .filter(|r| {
            r.is_final()
                && r.is_write()
                && r.verb != "delete"
                && r.succeeded()
                && r.subresource.is_empty()
                && r.is_object("leases", namespace, name)
        })
        .map(|r| LeaseWrite {
            holder: r.lease_holder.clone().unwrap_or_else(|| r.user.clone()),
            record: r.clone(),
        })
        .collect();
    writes.sort_by_key(|w| w.record.completed);
    writes
}

/// One holder's time with the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    /// Empty: released (nobody holds it).
    pub holder: String,
    /// Completion of the first write that gave it to this holder.
    pub since: Timestamp,
    /// Receipt of the last write of this tenure.
    pub last_write: Timestamp,
    pub writes: usize,
}

/// Who held the Lease when, from its successful writes.
pub fn timeline(records: &[Record], namespace: &str, name: &str) -> Vec<Tenure> {
    let mut tenures: Vec<Tenure> = Vec::new();
    for w in lease_writes(records, namespace, name) {
        match tenures.last_mut() {
            Some(t) if t.holder == w.holder => {
                t.last_write = w.record.received;
                t.writes += 1;
            }
            _ => tenures.push(Tenure {
                holder: w.holder.clone(),
                since: w.record.completed,
                last_write: w.record.received,
                writes: 1,
            }),
        }
    }
    tenures
}

/// What checking leadership looks at.
#[derive(Clone, Debug)]
pub struct LeaseCheck {
    pub namespace: String,
    pub name: String,
    /// Only writes by these users count (default [`super::REPLICAS`]).
    pub replicas: Vec<String>,
    /// A replica must not write once this long has passed since its last successful renewal
    /// was received...
    pub renew_deadline: Duration,
    /// ... plus this much for transit.
    pub margin: Duration,
    /// Writes of these resources do not count (default `leases`; the Lease itself never does).
    pub skip_resources: Vec<String>,
    /// Only writes in these namespaces count (empty: every namespace, and cluster scope).
    pub namespaces: Vec<String>,
    /// The `holderIdentity` a user writes into the Lease (laneway's `--identity`), where it is
    /// not the user's own name.
    pub holder_names: BTreeMap<String, String>,
}

/// One write by a replica, set against its Lease.
#[derive(Clone, Debug)]
pub struct WriteCheck {
    pub write: Record,
    /// The writer's latest successful Lease write received before this write was.
    pub renewal: Option<LeaseWrite>,
    /// From the receipt of `renewal` to the receipt of this write.
    pub since_renewal: Option<SignedDuration>,
    /// The first successful Lease write by another identity received after `renewal` and
    /// before this write completed that left someone else holding it (or nobody).
    pub lost_to: Option<LeaseWrite>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The writer had never successfully written the Lease.
    NeverHeld,
    /// The writer's last Lease write before this one set another holder (a release, usually).
    NotHolder { holder: String },
    /// Received more than the renew deadline (plus margin) after the writer's last renewal.
    Stale { since_renewal: SignedDuration },
    /// Another identity took the Lease after the writer's last renewal and before this write
    /// completed.
    TwoWriters {
        holder: String,
        user: String,
        received: Timestamp,
    },
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub write: Record,
    pub problems: Vec<Problem>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.write)?;
        for p in &self.problems {
            match p {
                Problem::NeverHeld => write!(f, " never held the Lease;")?,
                Problem::NotHolder { holder } => write!(f, " its last Lease write left holder {holder:?};")?,
                Problem::Stale { since_renewal } => write!(f, " {since_renewal:#} after its last renewal;")?,
                Problem::TwoWriters {
                    holder,
                    user,
                    received,
                } => write!(
                    f,
                    " {user} gave the Lease to {holder:?} at {received} before this write completed;"
                )?,
            }
        }
        Ok(())
    }
}

impl LeaseCheck {
    pub fn new(namespace: &str, name: &str, renew_deadline: Duration, margin: Duration) -> LeaseCheck {
        LeaseCheck {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            replicas: super::REPLICAS.iter().map(|s| s.to_string()).collect(),
            renew_deadline,
            margin,
            skip_resources: vec!["leases".to_owned()],
            namespaces: Vec::new(),
            holder_names: BTreeMap::new(),
        }
    }

    /// Whether `holder` in the Lease names `user`.
    fn is_holder(&self, holder: &str, user: &str) -> bool {
        holder == user || self.holder_names.get(user).is_some_and(|h| h == holder)
    }

    fn counts(&self, r: &Record) -> bool {
        r.is_final()
            && r.is_write()
            && self.replicas.contains(&r.user)
            && !r.is_object("leases", &self.namespace, &self.name)
            && !self.skip_resources.contains(&r.resource)
            && (self.namespaces.is_empty() || self.namespaces.contains(&r.namespace))
    }

    /// Every counted write by a replica (succeeded or not), in order of receipt, with its Lease
    /// context.
    pub fn writes(&self, records: &[Record]) -> Vec<WriteCheck> {
        let lease = lease_writes(records, &self.namespace, &self.name);
        let mut writes: Vec<&Record> = records.iter().filter(|r| self.counts(r)).collect();
        writes.sort_by_key(|r| r.received);
        writes
            .into_iter()
            .map(|w| {
                let renewal = lease
                    .iter()
                    .filter(|l| l.record.user == w.user && l.record.received < w.received)
                    .max_by_key(|l| l.record.received)
                    .cloned();
                let since_renewal = renewal
                    .as_ref()
                    .map(|l| w.received.duration_since(l.record.received));
                let lost_to = renewal.as_ref().and_then(|mine| {
                    lease
                        .iter()
                        .filter(|l| {
                            l.record.user != w.user
                                && !self.is_holder(&l.holder, &w.user)
                                && l.record.received > mine.record.received
                                && l.record.received < w.completed
                        })
                        .min_by_key(|l| l.record.received)
                        .cloned()
                });
                WriteCheck {
                    write: w.clone(),
                    renewal,
                    since_renewal,
                    lost_to,
                }
            })
            .collect()
    }

    /// The writes a replica made without holding the Lease: never held it, past its renew
    /// deadline (plus margin), after giving it up, or after someone else took it.
    pub fn violations(&self, records: &[Record]) -> Vec<Violation> {
        let limit = SignedDuration::try_from(self.renew_deadline + self.margin).expect("duration");
        self.writes(records)
            .into_iter()
            .filter_map(|c| {
                let mut problems = Vec::new();
                match &c.renewal {
                    None => problems.push(Problem::NeverHeld),
                    Some(l) if !self.is_holder(&l.holder, &c.write.user) => {
                        problems.push(Problem::NotHolder {
                            holder: l.holder.clone(),
                        })
                    }
                    Some(_) => {}
                }
                if let Some(since) = c.since_renewal.filter(|s| *s > limit) {
                    problems.push(Problem::Stale { since_renewal: since });
                }
                if let Some(l) = &c.lost_to {
                    problems.push(Problem::TwoWriters {
                        holder: l.holder.clone(),
                        user: l.record.user.clone(),
                        received: l.record.received,
                    });
                }
                (!problems.is_empty()).then_some(Violation {
                    write: c.write,
                    problems,
                })
            })
            .collect()
    }
}

/// [`LeaseCheck::violations`] with the default replicas, counting writes of every resource but
/// Leases.
pub fn violations(
    records: &[Record],
    namespace: &str,
    name: &str,
    renew_deadline: Duration,
    margin: Duration,
) -> Vec<Violation> {
    LeaseCheck::new(namespace, name, renew_deadline, margin).violations(records)
}

/// The distinct users in the records.
pub fn users(records: &[Record]) -> BTreeSet<String> {
    records.iter().map(|r| r.user.clone()).collect()
}
