//! The workload and the driver's model of it. The model is the benchmark's ground truth: for
//! every change the driver makes it knows, through laneway's own core (`lanes::Index`), which of
//! laneway's EndpointSlices must change and to what, and what the built-in controller's slices
//! of the Service must then hold.
//!
//! Shape (as in BENCHMARKS.md's resolution benchmark, scaled with the pod count): N pods, N/10
//! Services of 10 pods each, two of them tagged with a lane; N/200 LaneRoutes of (at most) 100
//! services each, every one falling back to the next lane, every tenth strict. Up to 10k pods
//! in one namespace; above that, 500 pods per namespace (50k pods: 100 namespaces), each a
//! small copy of the same shape with its own LaneRoutes.
//!
//! The developer-lane shape ([`Shape::dev`]): N/10 Services of 10 untagged pods, 1,000 per
//! namespace at most (10k pods: one namespace, 50k: five), and in each namespace L LaneRoutes
//! `dev-0` .. that each span every Service of it (`serviceSelector: {}`, no fallback lane, not
//! strict) and own one pod in each of 1-3 Services (lane l: 1 + l % 3); in every other Service
//! a lane falls back to baseline.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use laneway::api::LaneRoute;
use laneway::lanes::{self, Config, ContainerPortInfo, Index, LanePlan, PodInfo, ServiceInfo};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The first namespace (the only one up to 10k pods), which also holds laneway's Lease.
pub const NS: &str = "bench";
/// Pods per namespace above 10k pods.
const PODS_PER_NAMESPACE: usize = 500;
/// Most pods per namespace of the developer-lane shape.
const DEV_PODS_PER_NAMESPACE: usize = 10_000;
pub const LANE_LABEL: &str = "laneway.io/lane";
/// Nodes the pods are spread over (the built-in controller leaves out pods on unknown nodes).
pub const NODES: usize = 10;
const PODS_PER_SERVICE: usize = 10;
const TAGGED_PER_SERVICE: usize = 2;
const SERVICES_PER_ROUTE: usize = 100;
/// Route l covers services l*20 .. l*20+99 (mod the count), so every service is in some lane
/// and most are in five.
const ROUTE_STRIDE: usize = 20;
/// Scale-downs never leave a service with fewer untagged pods than this, so that baseline, and
/// with it every non-strict lane, keeps a ready pod.
const MIN_UNTAGGED: usize = 3;

/// Object counts for a pod count.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Shape {
    pub pods: usize,
    #[serde(default = "one")]
    pub namespaces: usize,
    pub services: usize,
    /// LaneRoutes in all, `routes / namespaces` in each namespace.
    pub routes: usize,
    pub services_per_route: usize,
    /// LaneRoutes added at the end ("after 50 new LaneRoutes"; fewer at 1k pods, where there
    /// are only 5 to begin with).
    pub new_routes: usize,
    /// Developer lanes (the developer-lane shape when above 0; `routes` is the same number).
    #[serde(default)]
    pub dev_lanes: usize,
    /// Pods of the developer lanes, besides the `pods` untagged ones.
    #[serde(default)]
    pub lane_pods: usize,
}

impl Shape {
    pub fn new(pods: usize) -> Shape {
        let namespaces = if pods > 10_000 {
            pods / PODS_PER_NAMESPACE
        } else {
            1
        };
        let services = (pods / PODS_PER_SERVICE / namespaces).max(1) * namespaces;
        let routes = (pods / 200 / namespaces).max(1) * namespaces;
        Shape {
            pods: services * PODS_PER_SERVICE,
            namespaces,
            services,
            routes,
            services_per_route: SERVICES_PER_ROUTE.min(services / namespaces),
            new_routes: routes.min(50),
            dev_lanes: 0,
            lane_pods: 0,
        }
    }

    /// The developer-lane shape: `pods` untagged pods (N/10 Services, 10k pods a namespace at
    /// most), in each namespace `lanes` LaneRoutes over every Service, each with pods of its
    /// own in 1-3 of them.
    pub fn dev(pods: usize, lanes: usize) -> Shape {
        assert!(lanes > 0, "developer lanes: at least one lane");
        let namespaces = pods.div_ceil(DEV_PODS_PER_NAMESPACE).max(1);
        let services = (pods / PODS_PER_SERVICE / namespaces).max(1) * namespaces;
        let mut shape = Shape {
            pods: services * PODS_PER_SERVICE,
            namespaces,
            services,
            routes: lanes * namespaces,
            services_per_route: services / namespaces,
            new_routes: 0,
            dev_lanes: lanes,
            lane_pods: 0,
        };
        shape.lane_pods = (0..namespaces)
            .flat_map(|k| (0..lanes).map(move |l| (k, l)))
            .map(|(k, l)| shape.dev_lane_services(k, l).len())
            .sum();
        shape
    }

    pub fn is_dev(&self) -> bool {
        self.dev_lanes > 0
    }

    /// The Services developer lane `l` of namespace `k` has a pod in: 1 + l % 3 of them,
    /// spread out.
    pub fn dev_lane_services(&self, k: usize, l: usize) -> Vec<usize> {
        let n = self.services_per_ns();
        let mut s: Vec<usize> = (0..1 + l % 3)
            .map(|j| k * n + (l * 7 + j * (n / 3 + 1)) % n)
            .collect();
        s.sort();
        s.dedup();
        s
    }

    fn services_per_ns(&self) -> usize {
        self.services / self.namespaces
    }

    fn routes_per_ns(&self) -> usize {
        self.routes / self.namespaces
    }

    /// The namespace of service `s` (services are numbered across namespaces).
    pub fn ns_of(&self, s: usize) -> usize {
        s / self.services_per_ns()
    }

    /// The LaneRoutes there are to begin with: (namespace, number in it).
    pub fn initial_routes(&self) -> Vec<(usize, usize)> {
        (0..self.namespaces)
            .flat_map(|k| (0..self.routes_per_ns()).map(move |l| (k, l)))
            .collect()
    }

    /// The LaneRoutes added at the end, spread over the namespaces.
    pub fn added_routes(&self) -> Vec<(usize, usize)> {
        (0..self.new_routes)
            .map(|j| (j % self.namespaces, self.routes_per_ns() + j / self.namespaces))
            .collect()
    }
}

fn one() -> usize {
    1
}

/// Namespace number `k`: `bench`, `bench-1`, `bench-2`, ...
pub fn namespace_name(k: usize) -> String {
    if k == 0 {
        NS.to_owned()
    } else {
        format!("{NS}-{k}")
    }
}

/// The event types the driver injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A pod's Ready condition turns False, or back to True.
    Flip,
    /// An untagged pod gets a lane label, or loses it again.
    Relabel,
    /// A new pod, created and then reported running and ready.
    ScaleUp,
    /// A pod deleted (grace period 0, as a kubelet confirms at once).
    ScaleDown,
    /// The Ready condition of an untagged (baseline) pod turns False, or back to True.
    BaselineFlip,
    /// A Deployment's rolling update: every untagged pod of one Service replaced one by one (a
    /// new pod created and ready, then an old one deleted). Driven step by step by
    /// [`World::rollout_create`] and [`World::rollout_delete`], not by [`World::change`].
    Rollout,
}

impl EventKind {
    pub fn label(self) -> &'static str {
        match self {
            EventKind::Flip => "readiness flip",
            EventKind::Relabel => "relabel",
            EventKind::ScaleUp => "scale up",
            EventKind::ScaleDown => "scale down",
            EventKind::BaselineFlip => "baseline readiness flip",
            EventKind::Rollout => "baseline rolling update",
        }
    }
}

/// One request (or two, for a new pod) that makes a change.
#[derive(Clone, Debug)]
pub enum Request {
    Status { pod: String, body: Value },
    Label { pod: String, lane: Option<String> },
    Create { pod: Value, name: String, status: Value },
    Delete { pod: String },
}

/// A change with what each controller must show for it.
pub struct Change {
    /// The namespace of the pod the request is for.
    pub ns: String,
    pub request: Request,
    /// laneway's slices (by name) that must change: their new signature, `None` for deleted.
    pub laneway: Vec<(String, Option<String>)>,
    /// The Service whose built-in slices must change, and the signature of their union.
    pub builtin: Option<(String, String)>,
}

#[derive(Clone, Debug)]
struct PodModel {
    service: usize,
    ip: String,
    node: usize,
    lane: Option<String>,
    ready: bool,
    /// Last Ready lastTransitionTime (seconds), kept strictly increasing per pod: the built-in
    /// controller derives its trigger-time annotation from it.
    transition: i64,
    /// Created by a scale-up (removed first by scale-downs).
    added: bool,
    /// Given a lane by a relabel (the next relabel of the service takes it back).
    relabelled: bool,
}

pub struct World {
    pub shape: Shape,
    pods: BTreeMap<String, PodModel>,
    members: Vec<BTreeSet<String>>,
    index: Index,
    /// The lanes of each namespace.
    plans: Vec<LanePlan>,
    /// laneway's slices of each service, by name, with their signatures.
    outputs: Vec<BTreeMap<String, String>>,
    /// The names of laneway's Services of each service.
    service_outputs: Vec<BTreeSet<String>>,
    next_ip: u32,
    next_pod: u64,
    flip_cursor: Vec<usize>,
    relabel_cursor: usize,
}

pub fn service_name(s: usize) -> String {
    format!("s{s}")
}

pub fn lane_name(l: usize) -> String {
    format!("lane-{l}")
}

/// Developer lane `l` (its LaneRoute has the same name).
pub fn dev_lane_name(l: usize) -> String {
    format!("dev-{l}")
}

fn node_name(n: usize) -> String {
    format!("node-{n}")
}

/// A pod IP from a counter, in 10.128.0.0/9 (clear of the Service range 10.0.0.0/16).
fn ip(n: u32) -> String {
    format!("10.{}.{}.{}", 128 + (n >> 16), (n >> 8) & 255, n & 255)
}

fn now_seconds() -> i64 {
    Timestamp::now().as_second()
}

fn rfc3339(seconds: i64) -> String {
    Timestamp::from_second(seconds).expect("timestamp").to_string()
}

impl World {
    /// The initial pods, before any Service or LaneRoute is known to the model.
    pub fn new(shape: Shape) -> World {
        let mut w = World {
            shape,
            pods: BTreeMap::new(),
            members: vec![BTreeSet::new(); shape.services],
            index: Index::new(Config::default()),
            plans: vec![LanePlan::default(); shape.namespaces],
            outputs: vec![BTreeMap::new(); shape.services],
            service_outputs: vec![BTreeSet::new(); shape.services],
            next_ip: 1,
            next_pod: 0,
            flip_cursor: vec![0; shape.services],
            relabel_cursor: 0,
        };
        let now = now_seconds();
        if shape.is_dev() {
            w.add_dev_pods(now);
            return w;
        }
        for s in 0..shape.services {
            let local = s % shape.services_per_ns();
            for i in 0..PODS_PER_SERVICE {
                let lane = (i < TAGGED_PER_SERVICE).then(|| lane_name((local + i) % shape.routes_per_ns()));
                let name = format!("{}-{i}", service_name(s));
                let pod = PodModel {
                    service: s,
                    ip: ip(w.next_ip),
                    node: (s * PODS_PER_SERVICE + i) % NODES,
                    lane,
                    ready: true,
                    transition: now,
                    added: false,
                    relabelled: false,
                };
                w.next_ip += 1;
                w.insert_pod(name, pod);
            }
        }
        w
    }

    /// The developer-lane shape's pods: 10 untagged ones per Service (`s3-0` ..), and one of
    /// each lane in each of its Services (`s3-dev-7`).
    fn add_dev_pods(&mut self, now: i64) {
        let shape = self.shape;
        let mut pods: Vec<(usize, String, Option<String>)> = Vec::new();
        for s in 0..shape.services {
            for i in 0..PODS_PER_SERVICE {
                pods.push((s, format!("{}-{i}", service_name(s)), None));
            }
        }
        let lanes = (0..shape.namespaces).flat_map(|k| (0..shape.dev_lanes).map(move |l| (k, l)));
        for (k, l) in lanes {
            for s in shape.dev_lane_services(k, l) {
                let lane = dev_lane_name(l);
                pods.push((s, format!("{}-{lane}", service_name(s)), Some(lane)));
            }
        }
        for (n, (s, name, lane)) in pods.into_iter().enumerate() {
            let pod = PodModel {
                service: s,
                ip: ip(self.next_ip),
                node: n % NODES,
                lane,
                ready: true,
                transition: now,
                added: false,
                relabelled: false,
            };
            self.next_ip += 1;
            self.insert_pod(name, pod);
        }
    }

    pub fn pod_names(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    pub fn node_json(n: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(n),
            "labels": {"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": node_name(n)}}})
    }

    pub fn service_json(&self, s: usize) -> Value {
        let ns = namespace_name(self.shape.ns_of(s));
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": service_name(s), "namespace": ns},
            "spec": {"selector": {"app": service_name(s)},
                     "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}})
    }

    /// The pod as created (status is set afterwards through the status subresource).
    pub fn pod_json(&self, name: &str) -> Value {
        let p = &self.pods[name];
        let mut labels = BTreeMap::from([("app".to_owned(), service_name(p.service))]);
        if let Some(lane) = &p.lane {
            labels.insert(LANE_LABEL.to_owned(), lane.clone());
        }
        let ns = namespace_name(self.shape.ns_of(p.service));
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": node_name(p.node), "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "app", "image": "example/app:1",
                                     "ports": [{"name": "http", "containerPort": 8080}]}]}})
    }

    /// The status a kubelet would report: running, with its IP, Ready as the model has it.
    pub fn pod_status_json(&self, name: &str) -> Value {
        let p = &self.pods[name];
        json!({"status": {"phase": "Running", "podIP": p.ip, "podIPs": [{"ip": p.ip}],
            "conditions": [ready_condition(p.ready, p.transition)]}})
    }

    /// LaneRoute number `l` of namespace `k`.
    pub fn route_json(&self, (k, l): (usize, usize)) -> Value {
        if self.shape.is_dev() {
            return json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
                "metadata": {"name": dev_lane_name(l), "namespace": namespace_name(k)},
                "spec": {"serviceSelector": {}}});
        }
        let per_ns = self.shape.services_per_ns();
        let base = l
            .checked_sub(self.shape.routes_per_ns())
            .map_or(l * ROUTE_STRIDE, |j| j * ROUTE_STRIDE + 7);
        let services: Vec<String> = (0..self.shape.services_per_route)
            .map(|m| service_name(k * per_ns + (base + m) % per_ns))
            .collect();
        // The next lane, unless it is this one (a namespace with a single LaneRoute).
        let fallback: Vec<String> = Some(lane_name((l + 1) % self.shape.routes_per_ns()))
            .filter(|f| *f != lane_name(l))
            .into_iter()
            .collect();
        json!({"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
            "metadata": {"name": lane_name(l), "namespace": namespace_name(k)},
            "spec": {"services": services, "fallback": fallback, "strict": l % 10 == 0}})
    }

    /// The model learns a Service as the API server stored it (with its defaults).
    pub fn add_service(&mut self, svc: ServiceInfo) {
        self.index.apply(svc);
    }

    /// The model learns LaneRoutes as the API server stored them; returns the laneway slices
    /// that must change for them.
    pub fn add_routes(&mut self, routes: Vec<LaneRoute>) -> Vec<(String, Option<String>)> {
        for r in routes {
            self.index.apply(r);
        }
        self.replan()
    }

    /// Recomputes the lanes and every service's laneway slices; returns what changed.
    pub fn replan(&mut self) -> Vec<(String, Option<String>)> {
        for (k, plan) in self.plans.iter_mut().enumerate() {
            *plan = lanes::lane_plan(&self.index, &namespace_name(k), Timestamp::now());
        }
        let mut changed = Vec::new();
        for s in 0..self.shape.services {
            changed.extend(self.refresh_outputs(s));
        }
        changed
    }

    /// Every laneway slice a laneway starting now should write: the model first forgets the
    /// Services it learned while another controller ran the events (a lane keeps its Service
    /// only once laneway made it).
    pub fn laneway_cold(&mut self) -> Vec<(String, Option<String>)> {
        for s in 0..self.shape.services {
            let ns = namespace_name(self.shape.ns_of(s));
            for gone in std::mem::take(&mut self.service_outputs[s]) {
                self.index.delete::<ServiceInfo>(&ns, &gone);
            }
        }
        self.replan();
        self.laneway_all()
    }

    /// Every laneway slice there should be, with its signature.
    pub fn laneway_all(&self) -> Vec<(String, Option<String>)> {
        self.outputs
            .iter()
            .flat_map(|o| o.iter().map(|(n, sig)| (n.clone(), Some(sig.clone()))))
            .collect()
    }

    pub fn laneway_slice_count(&self) -> usize {
        self.outputs.iter().map(BTreeMap::len).sum()
    }

    /// Every Service's built-in slice signature.
    pub fn builtin_all(&self) -> Vec<(String, String)> {
        (0..self.shape.services)
            .map(|s| (service_name(s), self.builtin_sig(s)))
            .collect()
    }

    /// Makes a change of `kind` in service `s`; `None` when the service has no pod that fits.
    pub fn change(&mut self, kind: EventKind, s: usize) -> Option<Change> {
        self.changing(s, |w| match kind {
            EventKind::Flip => w.flip(s, false),
            EventKind::BaselineFlip => w.flip(s, true),
            EventKind::Relabel => w.relabel(s),
            EventKind::ScaleUp => Some(w.scale_up(s)),
            EventKind::ScaleDown => w.scale_down(s),
            EventKind::Rollout => panic!("a rolling update is driven step by step"),
        })
    }

    /// The untagged pods of service `s`, the ones a rolling update replaces.
    pub fn baseline_pods(&self, s: usize) -> Vec<String> {
        self.members[s]
            .iter()
            .filter(|n| self.pods[*n].lane.is_none())
            .cloned()
            .collect()
    }

    /// A rolling update's first step for one pod: a new untagged pod of `s`, created and ready.
    pub fn rollout_create(&mut self, s: usize) -> Change {
        self.changing(s, |w| Some(w.new_pod(s, "r", false)))
            .expect("a new pod")
    }

    /// A rolling update's second step for one pod: the old pod `name` of `s` deleted.
    pub fn rollout_delete(&mut self, s: usize, name: &str) -> Change {
        self.changing(s, |w| Some(w.delete_pod(s, name.to_owned())))
            .expect("a deletion")
    }

    /// The change `make` makes in service `s`, with what each controller must show for it.
    fn changing(&mut self, s: usize, make: impl FnOnce(&mut World) -> Option<Request>) -> Option<Change> {
        let before = self.builtin_sig(s);
        let request = make(self)?;
        let laneway = self.refresh_outputs(s);
        let after = self.builtin_sig(s);
        let builtin = (after != before).then(|| (service_name(s), after));
        Some(Change {
            ns: namespace_name(self.shape.ns_of(s)),
            request,
            laneway,
            builtin,
        })
    }

    /// `baseline_only`: untagged pods only.
    fn flip(&mut self, s: usize, baseline_only: bool) -> Option<Request> {
        // Only pods that both controllers publish: untagged ones and those whose lane includes
        // the service (a pod of a lane that leaves the service out is in none of laneway's
        // slices, and its flip would time nothing for laneway). Bring back a pod that is down;
        // otherwise take the next one down, so that a service has at most one pod not ready
        // and lanes keep their own pods most of the time.
        let lanes = self.plans[self.shape.ns_of(s)].by_service.get(&service_name(s));
        let names: Vec<&String> = self.members[s]
            .iter()
            .filter(|n| match &self.pods[*n].lane {
                None => true,
                Some(_) if baseline_only => false,
                Some(lane) => lanes.is_some_and(|l| l.contains(lane)),
            })
            .collect();
        let name = match names.iter().find(|n| !self.pods[**n].ready) {
            Some(n) => (*n).clone(),
            None => {
                let c = &mut self.flip_cursor[s];
                *c += 1;
                names.get(*c % names.len().max(1))?.to_string()
            }
        };
        let p = self.pods.get_mut(&name).expect("pod");
        p.ready = !p.ready;
        p.transition = (p.transition + 1).max(now_seconds());
        let body = json!({"status": {"conditions": [ready_condition(p.ready, p.transition)]}});
        let info = self.pod_info(&name);
        self.index.apply(info);
        Some(Request::Status { pod: name, body })
    }

    fn relabel(&mut self, s: usize) -> Option<Request> {
        let back = self.members[s].iter().find(|n| self.pods[*n].relabelled).cloned();
        let (name, lane) = match back {
            Some(name) => (name, None),
            None => {
                let name = self.members[s]
                    .iter()
                    .find(|n| {
                        let p = &self.pods[*n];
                        p.lane.is_none() && p.ready && !p.added
                    })?
                    .clone();
                let lanes = self.plans[self.shape.ns_of(s)].by_service.get(&service_name(s));
                let lane = if self.shape.is_dev() {
                    // A developer lane with no pod of its own in the service (it falls back to
                    // baseline there), a different one each time.
                    let own: BTreeSet<&String> = self.members[s]
                        .iter()
                        .filter_map(|n| self.pods[n].lane.as_ref())
                        .collect();
                    let free: Vec<&String> =
                        lanes.into_iter().flatten().filter(|l| !own.contains(l)).collect();
                    self.relabel_cursor += 1;
                    free.get(self.relabel_cursor % free.len().max(1))
                        .map(|l| l.to_string())
                } else {
                    lanes.and_then(|lanes| lanes.first().cloned())
                }
                .unwrap_or_else(|| lane_name(0));
                (name, Some(lane))
            }
        };
        let p = self.pods.get_mut(&name).expect("pod");
        p.relabelled = lane.is_some();
        p.lane = lane.clone();
        let info = self.pod_info(&name);
        self.index.apply(info);
        Some(Request::Label { pod: name, lane })
    }

    fn scale_up(&mut self, s: usize) -> Request {
        self.new_pod(s, "u", true)
    }

    /// A new untagged pod of `s`, created and then reported running and ready; `added`: one
    /// that scale-downs remove first.
    fn new_pod(&mut self, s: usize, prefix: &str, added: bool) -> Request {
        self.next_pod += 1;
        let name = format!("{}-{prefix}{}", service_name(s), self.next_pod);
        let pod = PodModel {
            service: s,
            ip: ip(self.next_ip),
            node: self.next_pod as usize % NODES,
            lane: None,
            ready: true,
            transition: now_seconds(),
            added,
            relabelled: false,
        };
        self.next_ip += 1;
        self.insert_pod(name.clone(), pod);
        Request::Create {
            pod: self.pod_json(&name),
            status: self.pod_status_json(&name),
            name,
        }
    }

    fn scale_down(&mut self, s: usize) -> Option<Request> {
        let untagged: Vec<&String> = self.members[s]
            .iter()
            .filter(|n| self.pods[*n].lane.is_none())
            .collect();
        let name = match self.members[s].iter().rev().find(|n| self.pods[*n].added) {
            Some(n) => n.clone(),
            None if untagged.len() > MIN_UNTAGGED => untagged
                .iter()
                .rev()
                .find(|n| self.pods[**n].ready)
                .map(|n| (*n).clone())?,
            None => return None,
        };
        Some(self.delete_pod(s, name))
    }

    fn delete_pod(&mut self, s: usize, name: String) -> Request {
        self.pods.remove(&name);
        self.members[s].remove(&name);
        self.index
            .delete::<PodInfo>(&namespace_name(self.shape.ns_of(s)), &name);
        Request::Delete { pod: name }
    }

    fn insert_pod(&mut self, name: String, pod: PodModel) {
        self.members[pod.service].insert(name.clone());
        self.pods.insert(name.clone(), pod);
        let info = self.pod_info(&name);
        self.index.apply(info);
    }

    /// What laneway derives from the pod (`PodInfo::from_pod` of the object the API holds).
    fn pod_info(&self, name: &str) -> PodInfo {
        let p = &self.pods[name];
        let mut labels = BTreeMap::from([("app".to_owned(), service_name(p.service))]);
        if let Some(lane) = &p.lane {
            labels.insert(LANE_LABEL.to_owned(), lane.clone());
        }
        PodInfo {
            namespace: namespace_name(self.shape.ns_of(p.service)),
            name: name.into(),
            uid: String::new(),
            labels,
            ips: vec![p.ip.clone()],
            ready: p.ready,
            terminating: false,
            terminal: false,
            node_name: Some(node_name(p.node)),
            ports: vec![ContainerPortInfo {
                name: Some("http".into()),
                port: 8080,
                protocol: "TCP".into(),
            }],
        }
    }

    /// Recomputes laneway's slices of service `s`; returns those that changed. The model then
    /// learns laneway's Services as the operator's watch shows them once written (a lane keeps
    /// its Service while it includes the service).
    fn refresh_outputs(&mut self, s: usize) -> Vec<(String, Option<String>)> {
        let k = self.shape.ns_of(s);
        let ns = namespace_name(k);
        let out = lanes::service_output(&self.index, &ns, &self.plans[k], &service_name(s));
        let services: BTreeSet<String> = out.services.iter().map(|svc| svc.name_any()).collect();
        for gone in self.service_outputs[s].difference(&services) {
            self.index.delete::<ServiceInfo>(&ns, gone);
        }
        for svc in &out.services {
            self.index
                .apply(ServiceInfo::from_service(svc).expect("a Service of laneway's"));
        }
        self.service_outputs[s] = services;
        let new: BTreeMap<String, String> = out
            .slices
            .iter()
            .map(|sl| (sl.metadata.name.clone().unwrap_or_default(), laneway_sig(sl)))
            .collect();
        let old = std::mem::replace(&mut self.outputs[s], new);
        let new = &self.outputs[s];
        let mut changed: Vec<(String, Option<String>)> = new
            .iter()
            .filter(|(n, sig)| old.get(*n) != Some(*sig))
            .map(|(n, sig)| (n.clone(), Some(sig.clone())))
            .collect();
        changed.extend(
            old.keys()
                .filter(|n| !new.contains_key(*n))
                .map(|n| (n.clone(), None)),
        );
        changed
    }

    /// The union of the endpoints the built-in controller writes for service `s`: every pod
    /// with an IP, ready or not.
    fn builtin_sig(&self, s: usize) -> String {
        let mut eps: Vec<String> = self.members[s]
            .iter()
            .map(|n| {
                let p = &self.pods[n];
                endpoint_key(n, &p.ip, Some(p.ready), Some(p.ready), Some(false))
            })
            .collect();
        eps.sort();
        eps.join(",")
    }
}

fn ready_condition(ready: bool, transition: i64) -> Value {
    json!({"type": "Ready", "status": if ready { "True" } else { "False" },
        "lastTransitionTime": rfc3339(transition)})
}

fn flag(v: Option<bool>) -> char {
    match v {
        Some(true) => 'T',
        Some(false) => 'F',
        None => '-',
    }
}

fn endpoint_key(
    pod: &str,
    addresses: &str,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> String {
    format!(
        "{pod}@{addresses}:{}{}{}",
        flag(ready),
        flag(serving),
        flag(terminating)
    )
}

/// One endpoint as the signatures spell it: pod, addresses, ready/serving/terminating.
pub fn endpoint_of(e: &Endpoint) -> String {
    let c = e.conditions.clone().unwrap_or_default();
    let pod = e
        .target_ref
        .as_ref()
        .and_then(|r| r.name.as_deref())
        .unwrap_or_default();
    endpoint_key(pod, &e.addresses.join("+"), c.ready, c.serving, c.terminating)
}

/// What a laneway slice must match: its endpoints, ports and owning LaneRoutes (names only:
/// uids and the rest of the metadata are not the routing).
pub fn laneway_sig(slice: &EndpointSlice) -> String {
    let mut eps: Vec<String> = slice.endpoints.iter().map(endpoint_of).collect();
    eps.sort();
    let mut ports: Vec<String> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            format!(
                "{}:{}:{}",
                p.name.as_deref().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.as_deref().unwrap_or_default()
            )
        })
        .collect();
    ports.sort();
    let mut owners: Vec<&str> = slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.name.as_str())
        .collect();
    owners.sort();
    format!("{}|{}|{}", eps.join(","), ports.join(","), owners.join(","))
}

/// The built-in signature of a Service from the endpoints of all its slices.
pub fn builtin_sig_of(endpoints: impl IntoIterator<Item = String>) -> String {
    let mut eps: Vec<String> = endpoints.into_iter().collect();
    eps.sort();
    eps.join(",")
}
