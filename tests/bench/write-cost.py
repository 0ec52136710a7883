#!/usr/bin/env python3
"""The API server's CPU per EndpointSlice write, by how the write is made, per Service create,
and per LaneRoute status write, by its number of services.

    eval "$(tests/envtest/start.sh /tmp/write-cost)"
    kubectl apply --server-side -f crds/
    python3 tests/bench/write-cost.py [WRITES]     # WRITE_COST_ONLY=statuses: the statuses alone
    tests/envtest/stop.sh /tmp/write-cost

Four clients write slices of 10 endpoints (each write changes one endpoint's readiness) as a
server-side apply, a JSON merge patch and a replace at the version last written, and create
slices by server-side apply and by a plain create. They create Services as laneway writes its
lane and baseline Services (one port, its labels and owner, no selector), with a cluster IP
and headless, by server-side apply and by a plain create. Then they write LaneRoute statuses
of 5, 50 and 100 services (each write changes one service's endpoint count) by server-side
apply, as laneway writes them, and by a replace at the version last written. The API server's
CPU (utime + stime of the envtest process, etcd included) is read from /proc before and after
each run, and what it allocated on its heap (what its garbage collector has to catch up with)
from its /metrics.
"""

import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time

WRITES = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
CLIENTS = 4
SLICES = 48  # a multiple of CLIENTS: each client has slices of its own
NS = "write-cost"
BASE = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
MANAGER = "laneway.io/controller"

config = json.loads(subprocess.check_output(["kubectl", "config", "view", "--raw", "-o", "json"]))
SERVER = config["clusters"][0]["cluster"]["server"].removeprefix("https://")
TOKEN = config["users"][0]["user"]["token"]
PID = int(os.environ["LANEWAY_ENVTEST_PID"])
TLS = ssl.create_default_context()
TLS.check_hostname = False
TLS.verify_mode = ssl.CERT_NONE


def connect():
    return http.client.HTTPSConnection(SERVER, context=TLS)


def send(conn, method, path, body=None, content_type="application/json"):
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300 and not (method == "DELETE" and response.status == 404):
        raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
    return json.loads(data)


def allocated_bytes():
    """What the API server (etcd included) has allocated on its heap since it started."""
    conn = connect()
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("go_memstats_alloc_bytes_total "):
            return float(line.split()[1])
    raise RuntimeError("go_memstats_alloc_bytes_total is not in the API server's /metrics")


def cpu_seconds():
    fields = open(f"/proc/{PID}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slice_object(name, i, flip):
    endpoints = [
        {
            "addresses": [f"10.0.{i}.{j}"],
            "conditions": {"ready": not (flip and j == 0)},
            "targetRef": {"kind": "Pod", "name": f"p{i}-{j}", "namespace": NS},
        }
        for j in range(10)
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": f"s{i}"},
            "annotations": {"laneway.io/applied-hash": str(flip)},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }


def service_object(name, headless):
    spec = {"type": "ClusterIP", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "laneway", "laneway.io/service": "s",
                       "laneway.io/role": "lane", "laneway.io/for-lane": "cost"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "s", "controller": True,
                                 "uid": "00000000-0000-0000-0000-000000000001"}],
        },
        "spec": spec,
    }


def service_creates(mode, headless):
    stamp = int(time.time() * 1000)
    base = f"/api/v1/namespaces/{NS}/services"

    def work(k):
        conn = connect()
        for r in range(WRITES // CLIENTS):
            name = f"v{stamp}-{r * CLIENTS + k}"
            obj = service_object(name, headless)
            if mode == "server-side apply":
                send(conn, "PATCH", f"{base}/{name}?fieldManager={MANAGER}&force=true", obj,
                     "application/apply-patch+yaml")
            else:
                send(conn, "POST", f"{base}?fieldManager={MANAGER}", obj)

    ip = "headless" if headless else "cluster IP"
    timed(f"Service create, {ip}: {mode}", work)


def route_status(services, n):
    entries = [
        {"name": f"s{i}", "laneService": f"s{i}-lane-cost", "baselineService": f"s{i}-baseline",
         "servedBy": f"s{i}-lane-cost", "endpoints": 2 + (n % 3 if i == n % services else 0),
         "source": "Lane"}
        for i in range(services)
    ]
    ready = {"type": "Ready", "status": "True", "reason": "Resolved",
             "message": f"{services} services resolved", "observedGeneration": 1,
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
            "status": {"observedGeneration": 1, "lane": "cost", "conditions": [ready],
                       "services": entries, "serviceCount": services, "fallbackCount": 0}}


def statuses(services, mode):
    base = f"/apis/laneway.io/v1alpha1/namespaces/{NS}/laneroutes"
    conn = connect()
    names = [f"cost-{services}-{k}" for k in range(CLIENTS)]
    versions = {}
    for name in names:
        send(conn, "DELETE", f"{base}/{name}")
        created = send(conn, "POST", base, {"apiVersion": "laneway.io/v1alpha1", "kind": "LaneRoute",
                                            "metadata": {"name": name},
                                            "spec": {"lane": "cost", "services": [f"s{i}" for i in range(services)]}})
        versions[name] = created["metadata"]["resourceVersion"]

    def work(k):
        conn = connect()
        version = versions[names[k]]
        for r in range(WRITES // CLIENTS):
            status = route_status(services, r + 1)
            if mode == "server-side apply":
                send(conn, "PATCH", f"{base}/{names[k]}/status?fieldManager={MANAGER}&force=true",
                     status, "application/apply-patch+yaml")
            else:
                status["metadata"] = {"name": names[k], "namespace": NS, "resourceVersion": version}
                written = send(conn, "PUT", f"{base}/{names[k]}/status?fieldManager={MANAGER}", status)
                version = written["metadata"]["resourceVersion"]

    timed(f"LaneRoute status of {services} services: {mode}", work)


def apply(conn, name, obj):
    return send(conn, "PATCH", f"{BASE}/{name}?fieldManager={MANAGER}&force=true", obj,
                "application/apply-patch+yaml")


def timed(label, work):
    """Runs work(client) on every client at once; prints the API server's CPU per write."""
    before, allocated, started = cpu_seconds(), allocated_bytes(), time.time()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = cpu_seconds() - before
    heap = (allocated_bytes() - allocated) / WRITES / 1e6
    print(f"| {label} | {WRITES} | {time.time() - started:.2f} | {cpu:.2f} | {cpu / WRITES * 1000:.2f} "
          f"| {heap:.2f} |", flush=True)


def updates(mode):
    conn = connect()
    names = [f"{mode.split()[0]}-{i}" for i in range(SLICES)]
    versions = {}
    for i, name in enumerate(names):
        send(conn, "DELETE", f"{BASE}/{name}")
        versions[name] = apply(conn, name, slice_object(name, i, 0))["metadata"]["resourceVersion"]

    def work(k):
        conn = connect()
        for r in range(WRITES // CLIENTS):
            i = (r * CLIENTS + k) % SLICES
            name, flip = names[i], (r // (SLICES // CLIENTS) + 1) % 2
            obj = slice_object(name, i, flip)
            if mode == "server-side apply":
                apply(conn, name, obj)
            elif mode == "merge patch":
                patch = {"metadata": {"annotations": obj["metadata"]["annotations"]},
                         "endpoints": obj["endpoints"]}
                send(conn, "PATCH", f"{BASE}/{name}?fieldManager={MANAGER}", patch,
                     "application/merge-patch+json")
            else:
                obj["metadata"]["resourceVersion"] = versions[name]
                written = send(conn, "PUT", f"{BASE}/{name}?fieldManager={MANAGER}", obj)
                versions[name] = written["metadata"]["resourceVersion"]

    timed(f"update: {mode}", work)


def creates(mode):
    stamp = int(time.time() * 1000)

    def work(k):
        conn = connect()
        for r in range(WRITES // CLIENTS):
            i = r * CLIENTS + k
            name = f"c{stamp}-{i}"
            obj = slice_object(name, i % 200, 0)
            if mode == "server-side apply":
                apply(conn, name, obj)
            else:
                send(conn, "POST", f"{BASE}?fieldManager={MANAGER}", obj)

    timed(f"create: {mode}", work)


conn = connect()
try:
    send(conn, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
except RuntimeError as e:
    if "409" not in str(e):
        raise
print("| write | writes | seconds | API server CPU s | CPU ms per write | MB allocated per write |")
print("| --- | --- | --- | --- | --- | --- |")
ONLY = os.environ.get("WRITE_COST_ONLY", "")  # "statuses": the LaneRoute status rows alone
for _ in range(2):
    if ONLY != "statuses":
        for mode in ["server-side apply", "merge patch", "replace at the version"]:
            updates(mode)
        for mode in ["server-side apply", "create"]:
            creates(mode)
        for headless in [True, False]:
            for mode in ["server-side apply", "create"]:
                service_creates(mode, headless)
    for count in [5, 50, 100]:
        for mode in ["server-side apply", "replace at the version"]:
            statuses(count, mode)
