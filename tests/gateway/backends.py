#!/usr/bin/env python3
"""Many small HTTP "pods" in one asyncio process, for the Gateway API tests (tests/gateway).

Each pod listens on its own IP:port (198.18.x.y inside the tests' network namespace) and answers
every request with 200 and JSON:

    {"pod": NAME, "method": "GET", "path": "/", "headers": {lower-case name: value},
     "chain": [NAME, ...]}

A pod with a next hop ({"gateway": "IP:PORT", "host": H, "path": P}) first calls the gateway
with `Host: H` for P, forwarding the incoming headers named in "forward" (default: x-lane) when
present, and answers with "chain": [NAME] + the downstream answer's chain, and that answer itself as
"downstream". When the next hop
answers non-2xx, the pod answers with that same status and an "error"; when it cannot be reached,
502. So one request through gateway-bff -> order -> user returns the pods that served each hop,
and a failure at any hop reaches the client with its own status. A browser gets pages, a script
and an image by path instead (see browser_resource).

Control: one JSON object per line on stdin, one JSON reply per line on stdout (same "id"):
  {"cmd": "add", "name": N, "ip": IP, "port": 0, "next": {...} | null, "forward": ["x-lane"],
   "status": 200, "delay_ms": 0}              -> {"ok": true, "port": BOUND_PORT}
  {"cmd": "set", "name": N, ...any of next/forward/status/delay_ms}
  {"cmd": "remove", "name": N, "graceful": true}
      graceful: stop listening, close idle keep-alive connections, let in-flight requests finish
      (answered with Connection: close); otherwise reset every connection at once.
  {"cmd": "stats"}                            -> {"ok": true, "requests": {N: count}}
  {"cmd": "stop"}, or EOF on stdin            -> exits
Errors reply {"ok": false, "error": "..."}. Diagnostics go to stderr. No thread, no polling: the
process sleeps in epoll when idle.
"""
import asyncio
import json
import sys

CALL_TIMEOUT = 10.0
MAX_IDLE_PER_GATEWAY = 64


class HttpError(Exception):
    pass


async def read_headers(reader):
    """Header lines until the blank line -> (dict of lower-case name -> value, raw list)."""
    headers = {}
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        if line in (b"\r\n", b"\n"):
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise HttpError(f"bad header line {line!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value


async def read_body(reader, headers, until_eof):
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                # trailers, then the blank line
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read() if until_eof else b""


class Gateways:
    """Keep-alive connections to gateways, for next-hop calls."""

    def __init__(self):
        self.idle = {}

    async def call(self, gateway, host, path, extra):
        ip, _, port = gateway.rpartition(":")
        ip = ip.strip("[]")
        head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in extra)
        data = (head + "\r\n").encode("latin-1")
        for attempt in (0, 1):
            pool = self.idle.setdefault(gateway, [])
            reused = bool(pool)
            reader, writer = pool.pop() if reused else await asyncio.open_connection(ip, int(port))
            try:
                writer.write(data)
                await writer.drain()
                line = await reader.readline()
                if not line:
                    raise ConnectionResetError("connection closed before the response")
                status = int(line.split(b" ", 2)[1])
                headers = await read_headers(reader)
                keep = headers.get("connection", "").lower() != "close"
                body = await read_body(reader, headers, until_eof=not keep)
                if "content-length" not in headers and "chunked" not in headers.get(
                    "transfer-encoding", ""
                ):
                    keep = False
            except (ConnectionError, asyncio.IncompleteReadError, HttpError, ValueError, IndexError):
                writer.close()
                if reused and attempt == 0:
                    continue  # a stale keep-alive connection: once more on a new one
                raise
            if keep and len(pool) < MAX_IDLE_PER_GATEWAY and not reader.at_eof():
                pool.append((reader, writer))
            else:
                writer.close()
            return status, body
        raise ConnectionResetError("unreachable")


GATEWAYS = Gateways()


class Pod:
    def __init__(self, spec):
        self.name = spec["name"]
        self.ip = spec["ip"]
        self.port = int(spec.get("port") or 0)
        self.next = None
        self.forward = ["x-lane"]
        self.status = 200
        self.delay = 0.0
        self.configure(spec)
        self.server = None
        self.conns = {}  # writer -> busy (a request is being served)
        self.closing = False
        self.requests = 0

    def configure(self, spec):
        if "next" in spec:
            self.next = spec["next"]
        if "forward" in spec:
            self.forward = [h.lower() for h in spec["forward"]]
        if "status" in spec:
            self.status = int(spec["status"])
        if "delay_ms" in spec:
            self.delay = float(spec["delay_ms"]) / 1000.0

    async def start(self):
        self.server = await asyncio.start_server(self.serve, self.ip, self.port, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self, graceful):
        self.closing = True
        self.server.close()
        if graceful:
            for writer, busy in list(self.conns.items()):
                if not busy:
                    writer.close()
            for _ in range(200):  # in-flight requests: at most 10 s
                if not self.conns:
                    break
                await asyncio.sleep(0.05)
        for writer in list(self.conns):
            writer.transport.abort()

    async def serve(self, reader, writer):
        self.conns[writer] = False
        try:
            while not self.closing:
                line = await reader.readline()
                if not line:
                    break
                self.conns[writer] = True
                method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
                headers = await read_headers(reader)
                await read_body(reader, headers, until_eof=False)
                self.requests += 1
                status, answer = await self.answer(method, target, headers)
                conn = headers.get("connection", "").lower()
                keep = (version == "HTTP/1.1" and conn != "close") or conn == "keep-alive"
                keep = keep and not self.closing
                ctype, body, extra = "application/json", json.dumps(answer), ""
                resource = browser_resource(self.name, target.split("?", 1)[0])
                if resource:
                    status, ctype, body, extra = resource
                body = body.encode()
                head = (
                    f"HTTP/1.1 {status} {'OK' if status < 400 else 'Error'}\r\n"
                    f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                    f"X-Pod: {self.name}\r\n{extra}"
                    f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
                )
                writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
                await writer.drain()
                self.conns[writer] = False
                if not keep:
                    break
        except (OSError, asyncio.IncompleteReadError, HttpError, ValueError):
            pass
        finally:
            self.conns.pop(writer, None)
            writer.close()

    async def answer(self, method, target, headers):
        answer = {"pod": self.name, "method": method, "path": target, "headers": headers,
                  "chain": [self.name]}
        if self.delay:
            await asyncio.sleep(self.delay)
        status = self.status
        hop = self.next
        if hop:
            extra = [(h, headers[h]) for h in self.forward if h in headers]
            try:
                code, body = await asyncio.wait_for(
                    GATEWAYS.call(hop["gateway"], hop["host"], hop.get("path", "/"), extra),
                    CALL_TIMEOUT,
                )
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, HttpError,
                    ValueError, IndexError) as e:
                answer["error"] = f"next hop {hop['host']}: {e!r}"
                return 502, answer
            text = body.decode("utf-8", "replace")
            try:
                down = json.loads(text)
            except ValueError:
                down = None
            if isinstance(down, dict) and isinstance(down.get("chain"), list):
                answer["chain"] += down["chain"]
            answer["downstream"] = down if isinstance(down, dict) else text[:300]
            if not 200 <= code < 300:
                answer["error"] = f"next hop {hop['host']} answered {code}"
                return code, answer
        return status, answer


PAGE = """<!doctype html><html><head><title>POD</title><script src="/app.js"></script></head>
<body><p id="page">POD</p><p id="script"></p><p id="xhr"></p><img id="img" src="/logo.svg">
<a id="next" href="/next">next</a></body></html>"""

SCRIPT = """window.addEventListener('DOMContentLoaded', function () {
  document.getElementById('script').textContent = 'POD';
  var xhr = new XMLHttpRequest();
  xhr.onload = function () { document.getElementById('xhr').textContent = JSON.parse(xhr.responseText).pod; };
  xhr.open('GET', '/api/whoami');
  xhr.send();
});"""

IMAGE = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><title>POD</title></svg>'


def browser_resource(pod, path):
    """What a browser loads, by path: pages (*.html) that load a script (*.js), an image (*.svg)
    and the JSON answer by XHR, each naming the pod that served it; /next redirects to a second
    page. (status, content type, body, extra header lines), or None for the JSON answer."""
    if path == "/next":
        return 302, "text/plain", "", "Location: /second.html\r\n"
    for suffix, ctype, text in ((".html", "text/html", PAGE), (".js", "application/javascript", SCRIPT),
                                (".svg", "image/svg+xml", IMAGE)):
        if path.endswith(suffix):
            return 200, ctype, text.replace("POD", pod), ""
    return None


PODS = {}


async def command(cmd):
    what = cmd.get("cmd")
    if what == "add":
        if cmd["name"] in PODS:
            raise ValueError(f"pod {cmd['name']} exists")
        pod = Pod(cmd)
        await pod.start()
        PODS[pod.name] = pod
        return {"port": pod.port}
    if what == "set":
        PODS[cmd["name"]].configure(cmd)
        return {}
    if what == "remove":
        pod = PODS.pop(cmd["name"])
        await pod.stop(cmd.get("graceful", True))
        return {"requests": pod.requests}
    if what == "stats":
        return {"requests": {name: pod.requests for name, pod in PODS.items()}}
    raise ValueError(f"unknown command {what!r}")


async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                cmd = json.loads(line)
            except ValueError as e:
                print(json.dumps({"ok": False, "error": f"bad command: {e}"}), flush=True)
                continue
            if cmd.get("cmd") == "stop":
                print(json.dumps({"ok": True, "id": cmd.get("id")}), flush=True)
                break
            try:
                reply = {"ok": True, **(await command(cmd))}
            except Exception as e:  # reported to the caller, the process keeps serving
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            reply["id"] = cmd.get("id")
            print(json.dumps(reply), flush=True)
    finally:
        for pod in list(PODS.values()):
            await pod.stop(False)
        for conns in GATEWAYS.idle.values():
            for _, writer in conns:
                writer.close()
        await asyncio.sleep(0.05)  # let the reset connections' handlers finish


if __name__ == "__main__":
    asyncio.run(main())
