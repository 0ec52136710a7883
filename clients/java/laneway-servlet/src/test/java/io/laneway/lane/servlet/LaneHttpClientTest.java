package io.laneway.lane.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import com.sun.net.httpserver.Headers;
import io.laneway.lane.Lane;
import io.laneway.lane.OwnLane;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneHttpClientTest {
    @TempDir
    Path dir;

    private Downstream downstream;
    private HttpClient raw;
    private HttpClient http;

    @BeforeEach
    void start() throws Exception {
        downstream = new Downstream();
        raw = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        http = LaneHttpClient.wrap(raw);
    }

    @AfterEach
    void stop() {
        downstream.close();
        Lane.set(null);
        OwnLane.configure(null, null);
    }

    private Headers received() throws InterruptedException {
        Headers headers = downstream.received.poll(5, TimeUnit.SECONDS);
        if (headers == null) {
            throw new AssertionError("downstream received nothing");
        }
        return headers;
    }

    private HttpRequest.Builder get() {
        return HttpRequest.newBuilder(downstream.uri()).timeout(Duration.ofSeconds(5));
    }

    @Test
    void sendAddsTheLaneHeader() throws Exception {
        Lane.set("dev-alice");
        HttpResponse<String> response = http.send(get().build(), HttpResponse.BodyHandlers.ofString());
        assertEquals("[dev-alice]", response.body());
        assertEquals(List.of("dev-alice"), received().get("x-lane"));
    }

    @Test
    void sendAsyncAddsTheLaneHeaderOfTheCallerNotOfTheCompletingThread() throws Exception {
        Lane.set("dev-alice");
        var future = http.sendAsync(get().build(), HttpResponse.BodyHandlers.ofString());
        Lane.set("gray");
        assertEquals("[dev-alice]", future.get(5, TimeUnit.SECONDS).body());
        http.sendAsync(get().build(), HttpResponse.BodyHandlers.ofString(), null).get(5, TimeUnit.SECONDS);
        received();
        assertEquals(List.of("gray"), received().get("x-lane"));
    }

    @Test
    void aLaneHeaderAlreadyOnTheRequestIsKept() throws Exception {
        Lane.set("dev-alice");
        http.send(get().header("X-Lane", "blue").build(), HttpResponse.BodyHandlers.discarding());
        assertEquals(List.of("blue"), received().get("x-lane"));
    }

    @Test
    void noLaneAndNoOwnLaneSendsNoHeader() throws Exception {
        http.send(get().build(), HttpResponse.BodyHandlers.discarding());
        assertNull(received().get("x-lane"));
    }

    @Test
    void theOwnLaneIsSentOutsideAnyRequest() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, null);
        http.send(get().build(), HttpResponse.BodyHandlers.discarding());
        assertEquals(List.of("gray"), received().get("x-lane"));
    }

    @Test
    void theRestOfTheRequestIsUnchanged() throws Exception {
        Lane.set("dev-alice");
        HttpRequest request = get().header("x-trace", "t1")
                .POST(HttpRequest.BodyPublishers.ofString("hello")).build();
        http.send(request, HttpResponse.BodyHandlers.discarding());
        Headers headers = received();
        assertEquals(List.of("t1"), headers.get("x-trace"));
        assertEquals("hello", downstream.bodies.poll(5, TimeUnit.SECONDS));
        assertEquals(request.timeout(), ((LaneHttpClient) http).withLane(request).timeout());
        assertEquals("POST", ((LaneHttpClient) http).withLane(request).method());
    }

    @Test
    void theHeaderNameIsConfigurable() throws Exception {
        Lane.set("dev-alice");
        LaneHttpClient.wrap(raw, "x-traffic-lane").send(get().build(), HttpResponse.BodyHandlers.discarding());
        Headers headers = received();
        assertEquals(List.of("dev-alice"), headers.get("x-traffic-lane"));
        assertNull(headers.get("x-lane"));
    }

    @Test
    void everythingElseIsTheWrappedClients() {
        assertEquals(raw.connectTimeout(), http.connectTimeout());
        assertEquals(raw.version(), http.version());
        assertEquals(raw.followRedirects(), http.followRedirects());
        assertSame(raw.sslContext(), http.sslContext());
        assertEquals(raw.executor(), http.executor());
        assertSame(http, LaneHttpClient.wrap(http), "wrapping twice adds nothing");
    }
}
