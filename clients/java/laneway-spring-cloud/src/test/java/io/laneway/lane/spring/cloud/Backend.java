package io.laneway.lane.spring.cloud;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

import com.sun.net.httpserver.HttpServer;
import io.laneway.lane.Probe;

/**
 * A service instance on 127.0.0.1: answers {@code NAME x-lane=VALUE} (or {@code -} for none), and
 * a probed request with a hop record naming it.
 */
final class Backend implements AutoCloseable {
    final String name;
    final AtomicInteger hits = new AtomicInteger();
    private final HttpServer server;

    Backend(String name) throws IOException {
        this.name = name;
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", exchange -> {
            hits.incrementAndGet();
            String lane = exchange.getRequestHeaders().getFirst("x-lane");
            byte[] body = (name + " x-lane=" + (lane == null ? "-" : lane)).getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "text/plain");
            if (exchange.getRequestHeaders().containsKey(Probe.MARK)) {
                exchange.getResponseHeaders().set(Probe.HOPS, "[{\"pod\":\"" + name + "\"}]");
            }
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
    }

    int port() {
        return server.getAddress().getPort();
    }

    String uri() {
        return "http://127.0.0.1:" + port();
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
