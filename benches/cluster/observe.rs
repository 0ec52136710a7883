//! The clock's stop: one watch on the namespace's EndpointSlices. Each watch event is stamped
//! when it arrives and checked against what the driver is waiting for, so a latency ends at the
//! watch event that showed the last affected slice in its new state, not at a poll.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::world::{builtin_sig_of, endpoint_of, laneway_sig, NS};

const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const SERVICE_NAME: &str = "kubernetes.io/service-name";
const LANEWAY: &str = "controller.laneway.io";
const BUILTIN: &str = "endpointslice-controller.k8s.io";

/// What is compared: one laneway slice by name (its names are deterministic), or everything
/// the built-in controller holds for one Service (its slice names are generated).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Slice(String),
    Service(String),
}

/// What `expect` waits for: each key in the given state (`None`: absent).
pub type Wants = Vec<(Key, Option<String>)>;

#[derive(Default)]
struct State {
    laneway: HashMap<String, String>,
    /// Built-in slices: slice name -> (Service, endpoints).
    builtin: HashMap<String, (String, Vec<String>)>,
    builtin_by_service: HashMap<String, BTreeSet<String>>,
    /// Per key, the states waited for, oldest first, with the wait they belong to.
    waits: HashMap<Key, VecDeque<(u64, Option<String>)>>,
    /// Open waits and how many of their keys are still to be seen.
    open: HashMap<u64, usize>,
    finished: Vec<(u64, Instant)>,
    next_id: u64,
    /// Slices seen since the watch (re)listed, to drop those gone meanwhile.
    relist: Option<HashSet<String>>,
}

impl State {
    fn current(&self, key: &Key) -> Option<String> {
        match key {
            Key::Slice(name) => self.laneway.get(name).cloned(),
            Key::Service(svc) => {
                let slices = self.builtin_by_service.get(svc)?;
                Some(builtin_sig_of(
                    slices.iter().flat_map(|s| self.builtin[s].1.iter().cloned()),
                ))
            }
        }
    }

    /// `key` is now `value`: every wait on it for this state, or for a state older than the
    /// newest one now shown (a controller may go straight to the newest), is met.
    fn seen(&mut self, key: Key, at: Instant) {
        if !self.waits.contains_key(&key) {
            return;
        }
        let value = self.current(&key);
        let queue = self.waits.get_mut(&key).expect("waits");
        let Some(last) = queue.iter().rposition(|(_, want)| *want == value) else {
            return;
        };
        let met: Vec<u64> = queue.drain(..=last).map(|(id, _)| id).collect();
        if queue.is_empty() {
            self.waits.remove(&key);
        }
        for id in met {
            if let Some(remaining) = self.open.get_mut(&id) {
                *remaining -= 1;
                if *remaining == 0 {
                    self.open.remove(&id);
                    self.finished.push((id, at));
                }
            }
        }
    }

    fn put(&mut self, slice: EndpointSlice, at: Instant) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        if let Some(seen) = self.relist.as_mut() {
            seen.insert(name.clone());
        }
        let labels = slice.metadata.labels.clone().unwrap_or_default();
        match labels.get(MANAGED_BY).map(String::as_str) {
            Some(LANEWAY) => {
                self.laneway.insert(name.clone(), laneway_sig(&slice));
                self.seen(Key::Slice(name), at);
            }
            Some(BUILTIN) => {
                let service = labels.get(SERVICE_NAME).cloned().unwrap_or_default();
                let eps = slice.endpoints.iter().map(endpoint_of).collect();
                self.builtin.insert(name.clone(), (service.clone(), eps));
                self.builtin_by_service
                    .entry(service.clone())
                    .or_default()
                    .insert(name);
                self.seen(Key::Service(service), at);
            }
            _ => {}
        }
    }

    fn remove(&mut self, name: &str, at: Instant) {
        if self.laneway.remove(name).is_some() {
            self.seen(Key::Slice(name.to_owned()), at);
        }
        if let Some((service, _)) = self.builtin.remove(name) {
            if let Some(set) = self.builtin_by_service.get_mut(&service) {
                set.remove(name);
                if set.is_empty() {
                    self.builtin_by_service.remove(&service);
                }
            }
            self.seen(Key::Service(service), at);
        }
    }
}

#[derive(Default)]
pub struct Observer {
    state: Mutex<State>,
    synced: AtomicBool,
    task: OnceLock<tokio::task::AbortHandle>,
}

impl Observer {
    /// Watches the benchmark namespaces' EndpointSlices until the process ends.
    pub fn spawn(client: Client) -> Arc<Observer> {
        let observer = Arc::new(Observer::default());
        let o = observer.clone();
        let task = tokio::spawn(async move {
            let api: Api<EndpointSlice> = Api::all(client);
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let at = Instant::now();
                let mut s = o.state.lock().expect("observer");
                let theirs = |slice: &EndpointSlice| {
                    slice
                        .metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|n| n.starts_with(NS))
                };
                match event {
                    Ok(watcher::Event::Apply(slice) | watcher::Event::InitApply(slice))
                        if !theirs(&slice) => {}
                    Ok(watcher::Event::Delete(slice)) if !theirs(&slice) => {}
                    Ok(watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) => s.put(slice, at),
                    Ok(watcher::Event::Delete(slice)) => {
                        s.remove(slice.metadata.name.as_deref().unwrap_or_default(), at)
                    }
                    Ok(watcher::Event::Init) => s.relist = Some(HashSet::new()),
                    Ok(watcher::Event::InitDone) => {
                        let seen = s.relist.take().unwrap_or_default();
                        let gone: Vec<String> = s
                            .laneway
                            .keys()
                            .chain(s.builtin.keys())
                            .filter(|n| !seen.contains(*n))
                            .cloned()
                            .collect();
                        for name in gone {
                            s.remove(&name, at);
                        }
                        o.synced.store(true, Ordering::Release);
                    }
                    Err(e) => eprintln!("bench: EndpointSlice watch failed ({e}); retrying"),
                }
            }
        });
        let _ = observer.task.set(task.abort_handle());
        observer
    }

    /// Ends the watch (before the control plane goes away).
    pub fn stop(&self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Starts a wait for every key in `wants` to reach its state; keys already there count as
    /// met. Returns its id (finished at once when nothing is left to see).
    pub fn expect(&self, wants: Wants) -> u64 {
        let mut s = self.state.lock().expect("observer");
        let id = s.next_id;
        s.next_id += 1;
        let mut remaining = 0;
        for (key, want) in wants {
            if s.current(&key) == want {
                continue;
            }
            s.waits.entry(key).or_default().push_back((id, want));
            remaining += 1;
        }
        if remaining == 0 {
            s.finished.push((id, Instant::now()));
        } else {
            s.open.insert(id, remaining);
        }
        id
    }

    /// Gives up a wait (its leftover entries are dropped when a later state is seen).
    pub fn cancel(&self, id: u64) {
        self.state.lock().expect("observer").open.remove(&id);
    }

    /// Waits finished since the last call, with when their last key was seen.
    pub fn take_finished(&self) -> Vec<(u64, Instant)> {
        std::mem::take(&mut self.state.lock().expect("observer").finished)
    }

    /// How many keys of wait `id` are still to be seen (0 when finished or unknown).
    pub fn remaining(&self, id: u64) -> usize {
        self.state
            .lock()
            .expect("observer")
            .open
            .get(&id)
            .copied()
            .unwrap_or(0)
    }

    /// A few keys still waited for, with the state shown and the state wanted (for a report
    /// when a wait times out).
    pub fn describe(&self, id: u64, limit: usize) -> Vec<String> {
        let s = self.state.lock().expect("observer");
        s.waits
            .iter()
            .filter_map(|(k, q)| {
                let (_, want) = q.iter().find(|(i, _)| *i == id)?;
                Some(format!("{k:?}: shown {:?}, wanted {want:?}", s.current(k)))
            })
            .take(limit)
            .collect()
    }
}
