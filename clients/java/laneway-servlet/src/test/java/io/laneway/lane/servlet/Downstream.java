package io.laneway.lane.servlet;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpServer;
import io.laneway.lane.Probe;

/**
 * A real HTTP server on 127.0.0.1 that records the headers of every request it receives, and
 * answers a probed request with one hop record of its own.
 */
final class Downstream implements AutoCloseable {
    final BlockingQueue<Headers> received = new LinkedBlockingQueue<>();
    final BlockingQueue<String> bodies = new LinkedBlockingQueue<>();
    private final HttpServer server;

    Downstream() throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext("/", exchange -> {
            received.add(exchange.getRequestHeaders());
            bodies.add(new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
            List<String> lane = exchange.getRequestHeaders().get("x-lane");
            byte[] body = String.valueOf(lane).getBytes(StandardCharsets.UTF_8);
            if (exchange.getRequestHeaders().containsKey(Probe.MARK)) {
                exchange.getResponseHeaders().add(Probe.HOPS,
                        "[{\"app\":\"down\",\"pod\":\"down-0\",\"lane\":" + (lane == null ? "null" : "\"" + lane.get(0) + "\"")
                                + ",\"learnt\":\"header\",\"own\":null}]");
            }
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.start();
    }

    URI uri() {
        return URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/");
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
