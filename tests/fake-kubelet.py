#!/usr/bin/env python3
"""Stands in for the kube-controller-manager and kubelet that a local control plane lacks:
creates the pods each Deployment asks for and reports them running and ready.

    fake-kubelet.py [NAMESPACE]            pod IPs from 10.244.0.0/16; exits once reported
    fake-kubelet.py --serve FIRST [NAMESPACE]
                                           pod IPs from FIRST upward (addresses this machine
                                           holds), and each pod answers HTTP on its container
                                           port `http` with its name, until stopped
    fake-kubelet.py --ips FIRST [NAMESPACE]
                                           pod IPs from FIRST upward; exits once reported
                                           (the pods' own processes serve them)

All namespaces when none is given."""
import http.server
import ipaddress
import json
import subprocess
import sys
import threading


def kubectl(*args, input=None):
    out = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def addresses(first):
    if first is None:
        n = 10
        while True:
            yield f"10.244.{n // 250}.{n % 250 + 1}"
            n += 1
    ip = ipaddress.ip_address(first)
    while True:
        yield str(ip)
        ip += 1


def http_port(spec):
    for c in spec.get("containers", []):
        for p in c.get("ports", []):
            if p.get("name") == "http":
                return p["containerPort"]
    return None


def serve(name, ip, port):
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (name + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((ip, port), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main():
    args = sys.argv[1:]
    first = None
    serving = args[:1] == ["--serve"]
    if args[:1] in (["--serve"], ["--ips"]):
        first, args = args[1], args[2:]
    scope = ["-n", args[0]] if args else ["-A"]
    deployments = json.loads(kubectl("get", "deployments", *scope, "-o", "json"))["items"]
    existing = json.loads(kubectl("get", "pods", *scope, "-o", "json"))["items"]
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in existing}
    used = {p.get("status", {}).get("podIP") for p in existing}
    ips = (ip for ip in addresses(first) if ip not in used)
    for d in deployments:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        template = d["spec"]["template"]
        for i in range(d["spec"].get("replicas", 1)):
            pod_name = f"{name}-{i}"
            existing = pods.get((ns, pod_name))
            if existing:
                ip = existing.get("status", {}).get("podIP")
            else:
                ip = next(ips)
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod_name, "namespace": ns, "labels": template["metadata"].get("labels", {})},
                    "spec": dict(template["spec"], nodeName="node-1"),
                }
                kubectl("apply", "-f", "-", input=json.dumps(pod))
                status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                     "conditions": [{"type": "Ready", "status": "True"}]}}
                kubectl("patch", "pod", pod_name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status))
                print(f"pod {ns}/{pod_name} running at {ip}", flush=True)
            port = http_port(template["spec"])
            if serving and ip and port:
                serve(pod_name, ip, port)
    if serving:
        print("serving", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
