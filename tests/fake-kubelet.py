#!/usr/bin/env python3
"""Stands in for the kube-controller-manager and kubelet that a local control plane lacks:
creates the pods each Deployment asks for and reports them running and ready, with pod IPs
from 10.244.0.0/16. Usage: fake-kubelet.py [NAMESPACE...] (all namespaces by default)."""
import json
import subprocess
import sys


def kubectl(*args, input=None):
    out = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def main():
    scope = ["-n", sys.argv[1]] if len(sys.argv) == 2 else ["-A"]
    deployments = json.loads(kubectl("get", "deployments", *scope, "-o", "json"))["items"]
    existing = json.loads(kubectl("get", "pods", *scope, "-o", "json"))["items"]
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in existing}
    used = {p.get("status", {}).get("podIP") for p in existing}
    next_ip = 10
    for d in deployments:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        template = d["spec"]["template"]
        for i in range(d["spec"].get("replicas", 1)):
            pod_name = f"{name}-{i}"
            if (ns, pod_name) in names:
                continue
            while f"10.244.{next_ip // 250}.{next_ip % 250 + 1}" in used:
                next_ip += 1
            ip = f"10.244.{next_ip // 250}.{next_ip % 250 + 1}"
            used.add(ip)
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
            print(f"pod {ns}/{pod_name} running at {ip}")


if __name__ == "__main__":
    main()
