package io.laneway.lane.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.lang.reflect.Proxy;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

import io.laneway.lane.Lane;
import io.laneway.lane.LaneMetrics;
import io.laneway.lane.OwnLane;
import io.laneway.lane.Probe;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** LaneFilter in a real Jetty 12 servlet container, and on its own for the thread-local's life. */
class LaneFilterTest {
    private static Server jetty;
    private static Downstream downstream;
    private static URI base;
    private static final HttpClient CLIENT = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    /** Answers with the lane it serves, after forwarding it to the downstream over LaneHttpClient. */
    static final class LaneServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;
        private final transient HttpClient http = LaneHttpClient.wrap(CLIENT);

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            String lane = Lane.current();
            if (req.getParameter("throw") != null) {
                throw new IllegalStateException("down");
            }
            if (req.getParameter("status") != null) {
                resp.setStatus(Integer.parseInt(req.getParameter("status")));
            }
            if (req.getParameter("forward") != null) {
                try {
                    http.send(HttpRequest.newBuilder(downstream.uri()).build(), HttpResponse.BodyHandlers.discarding());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IOException(e);
                }
            }
            resp.setContentType("text/plain");
            resp.getOutputStream().write(String.valueOf(lane).getBytes(StandardCharsets.UTF_8));
        }
    }

    private static ServletContextHandler context(String path, String header) {
        return context(path, header, false);
    }

    private static ServletContextHandler context(String path, String header, boolean sticky) {
        ServletContextHandler context = new ServletContextHandler(path);
        FilterHolder lanes = new FilterHolder(LaneFilter.class);
        if (header != null) {
            lanes.setInitParameter(LaneFilter.HEADER_PARAM, header);
        }
        if (sticky) {
            lanes.setInitParameter(LaneFilter.STICKY_COOKIE_PARAM, "true");
        }
        context.addFilter(lanes, "/*", EnumSet.of(DispatcherType.REQUEST));
        context.addServlet(new ServletHolder(new LaneServlet()), "/*");
        return context;
    }

    @BeforeAll
    static void start() throws Exception {
        downstream = new Downstream();
        jetty = new Server();
        ServerConnector http = new ServerConnector(jetty);
        http.setHost("127.0.0.1");
        http.setPort(0);
        jetty.addConnector(http);
        var contexts = new org.eclipse.jetty.server.handler.ContextHandlerCollection();
        contexts.addHandler(context("/default", null));
        contexts.addHandler(context("/custom", "x-traffic-lane"));
        contexts.addHandler(context("/sticky", null, true));
        jetty.setHandler(contexts);
        jetty.start();
        base = URI.create("http://127.0.0.1:" + http.getLocalPort());
    }

    @AfterAll
    static void stop() throws Exception {
        jetty.stop();
        downstream.close();
    }

    @AfterEach
    void clean() {
        Lane.set(null);
        downstream.received.clear();
    }

    private static String get(String path, String... headers) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(5));
        for (int i = 0; i < headers.length; i += 2) {
            request.header(headers[i], headers[i + 1]);
        }
        HttpResponse<String> response = CLIENT.send(request.build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, response.statusCode(), response.body());
        return response.body();
    }

    /** The Set-Cookie headers of an answer to GET {@code path}. */
    private static List<String> setCookies(String path, String... headers) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(5));
        for (int i = 0; i < headers.length; i += 2) {
            request.header(headers[i], headers[i + 1]);
        }
        HttpResponse<String> response = CLIENT.send(request.build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, response.statusCode(), response.body());
        return response.headers().allValues("set-cookie");
    }

    @Test
    void aStickyFilterGivesARequestInNoLaneTheInstancesLaneAsACookie(@TempDir Path dir) throws Exception {
        Path labels = dir.resolve("labels");
        try {
            Files.writeString(labels, "app=\"web\"\nlaneway.io/lane=\"gray\"\n");
            OwnLane.configure(labels, null);
            assertEquals(List.of("x-lane=gray; Path=/; HttpOnly; SameSite=Lax"), setCookies("/sticky/"));
            assertEquals(List.of(), setCookies("/sticky/", "x-lane", "gray"), "a request in a lane");
            assertEquals(List.of(), setCookies("/sticky/", "cookie", "a=1; x-lane=gray"), "a cookie is set already");
            assertEquals(List.of(), setCookies("/default/"), "not sticky unless asked");
            Files.writeString(labels, "app=\"web\"\n");
            OwnLane.configure(labels, null);
            assertEquals(List.of("x-lane=-; Path=/; HttpOnly; SameSite=Lax"), setCookies("/sticky/"),
                    "a baseline instance keeps the client on baseline");
            assertEquals(List.of(), setCookies("/sticky/", "cookie", "x-lane=-"));
        } finally {
            OwnLane.configure(null, null);
        }
    }

    @Test
    void theLaneComesFromTheLaneHeader() throws Exception {
        assertEquals("dev-alice", get("/default/", "x-lane", "dev-alice"));
        assertEquals("dev-alice", get("/default/", "X-Lane", "dev-alice"), "header names are case-insensitive");
    }

    @Test
    void elseFromW3cBaggage() throws Exception {
        assertEquals("gray", get("/default/", "baggage", "userId=alice, lane=gray;ttl=60"));
        assertEquals("gray", get("/default/", "baggage", "userId=alice", "baggage", "lane=gray"),
                "a second baggage header");
    }

    @Test
    void theHeaderBeatsBaggage() throws Exception {
        assertEquals("dev-alice", get("/default/", "x-lane", "dev-alice", "baggage", "lane=gray"));
    }

    @Test
    void anInvalidLaneIsIgnored() throws Exception {
        assertEquals("null", get("/default/", "x-lane", "dev alice"));
        assertEquals("null", get("/default/", "baggage", "lane=%3Cscript%3E"));
        assertEquals("gray", get("/default/", "x-lane", "-bad-", "baggage", "lane=gray"),
                "an invalid header falls through to baggage");
    }

    @Test
    void noLaneIsBaseline() throws Exception {
        assertEquals("null", get("/default/"));
    }

    @Test
    void theHeaderIsConfigurable() throws Exception {
        assertEquals("dev-alice", get("/custom/", "x-traffic-lane", "dev-alice"));
        assertEquals("null", get("/custom/", "x-lane", "dev-alice"));
    }

    @Test
    void theLaneIsForwardedToTheNextServiceOverHttp() throws Exception {
        assertEquals("dev-alice", get("/default/?forward=1", "baggage", "lane=dev-alice"));
        assertEquals(List.of("dev-alice"), downstream.received.poll(5, TimeUnit.SECONDS).get("x-lane"));
        assertEquals("null", get("/default/?forward=1"));
        assertNull(downstream.received.poll(5, TimeUnit.SECONDS).get("x-lane"));
    }

    /** A request with only these headers. */
    private static HttpServletRequest request(String... headers) {
        Map<String, List<String>> map = new LinkedHashMap<>();
        for (int i = 0; i < headers.length; i += 2) {
            map.computeIfAbsent(headers[i].toLowerCase(java.util.Locale.ROOT), k -> new ArrayList<>()).add(headers[i + 1]);
        }
        return (HttpServletRequest) Proxy.newProxyInstance(LaneFilterTest.class.getClassLoader(),
                new Class<?>[] {HttpServletRequest.class}, (proxy, method, args) -> {
                    String name = args != null && args.length == 1 && args[0] instanceof String
                            ? ((String) args[0]).toLowerCase(java.util.Locale.ROOT) : null;
                    switch (method.getName()) {
                        case "getHeader":
                            return map.containsKey(name) ? map.get(name).get(0) : null;
                        case "getHeaders":
                            return Collections.enumeration(map.getOrDefault(name, List.of()));
                        default:
                            throw new UnsupportedOperationException(method.getName());
                    }
                });
    }

    @Test
    void theThreadsLaneIsRestoredAfterTheRequest() throws Exception {
        LaneFilter filter = new LaneFilter();
        List<String> seen = new ArrayList<>();
        filter.doFilter(request("x-lane", "dev-alice"), null, (req, res) -> seen.add(Lane.current()));
        assertEquals(List.of("dev-alice"), seen);
        assertNull(Lane.current(), "the next request on this thread sees nothing");
        filter.doFilter(request(), null, (req, res) -> seen.add(Lane.current()));
        assertEquals(java.util.Arrays.asList("dev-alice", null), seen);
    }

    @Test
    void theThreadsLaneIsRestoredWhenTheRequestFails() {
        LaneFilter filter = new LaneFilter();
        assertThrows(ServletException.class, () -> filter.doFilter(request("x-lane", "dev-alice"), null,
                (req, res) -> {
                    throw new ServletException("boom");
                }));
        assertNull(Lane.current());
    }

    @Test
    void aRequestWithoutALaneDoesNotInheritOne() throws Exception {
        Lane.set("stale");
        List<String> seen = new ArrayList<>();
        new LaneFilter("x-lane").doFilter(request(), null, (req, res) -> seen.add(Lane.current()));
        assertEquals(java.util.Collections.singletonList(null), seen);
        assertEquals("stale", Lane.current(), "and the caller's lane is put back");
    }

    @Test
    void aProbedRequestIsAnsweredWithItsHopAndTheHopsOfItsOnwardCalls() throws Exception {
        System.setProperty(Probe.POD_PROPERTY, "bff-0");
        try {
            HttpRequest request = HttpRequest.newBuilder(base.resolve("/default/?forward=1"))
                    .header("x-lane", "dev-alice").header(Probe.MARK, "p-1").timeout(Duration.ofSeconds(5)).build();
            HttpResponse<String> response = CLIENT.send(request, HttpResponse.BodyHandlers.ofString());
            assertEquals("p-1", downstream.received.poll(5, TimeUnit.SECONDS).getFirst(Probe.MARK));
            assertEquals("[{\"app\":null,\"pod\":\"bff-0\",\"lane\":\"dev-alice\",\"learnt\":\"header\",\"own\":null},"
                    + "{\"app\":\"down\",\"pod\":\"down-0\",\"lane\":\"dev-alice\",\"learnt\":\"header\",\"own\":null}]",
                    response.headers().firstValue(Probe.HOPS).orElse(null));

            HttpResponse<String> plain = CLIENT.send(HttpRequest.newBuilder(base.resolve("/default/"))
                    .header("baggage", "lane=gray").timeout(Duration.ofSeconds(5)).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(Optional.empty(), plain.headers().firstValue(Probe.HOPS), "no mark, no records");
        } finally {
            System.clearProperty(Probe.POD_PROPERTY);
        }
    }

    @Test
    void aProbedHopRecordsHowItLearntTheLane() throws Exception {
        System.setProperty(Probe.POD_PROPERTY, "bff-0");
        try {
            HttpResponse<String> response = CLIENT.send(HttpRequest.newBuilder(base.resolve("/default/"))
                    .header("baggage", "lane=gray").header(Probe.MARK, "p-2").timeout(Duration.ofSeconds(5)).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals("[{\"app\":null,\"pod\":\"bff-0\",\"lane\":\"gray\",\"learnt\":\"baggage\",\"own\":null}]",
                    response.headers().firstValue(Probe.HOPS).orElse(null));
        } finally {
            System.clearProperty(Probe.POD_PROPERTY);
        }
    }

    @Test
    void eachRequestIsCountedByItsLaneAndHowItWasLearnt() throws Exception {
        List<String> told = Collections.synchronizedList(new ArrayList<>());
        Runnable unregister = LaneMetrics.register(LaneMetrics.of(
                (lane, learnt) -> told.add(lane + " " + learnt), caller -> told.add("lost " + caller)));
        try {
            get("/default/", "x-lane", "dev-alice");
            get("/default/", "baggage", "lane=gray");
            get("/default/");
        } finally {
            unregister.run();
        }
        assertEquals(List.of("dev-alice header", "gray baggage", "null none"), told);
    }

    @Test
    void aRequestAnsweredWithAServerErrorOrAnExceptionCountsAsFailedInItsLane() throws Exception {
        List<String> failed = Collections.synchronizedList(new ArrayList<>());
        Runnable unregister = LaneMetrics.register(new LaneMetrics() {
            @Override
            public void served(String lane, String learnt) {}

            @Override
            public void lost(String callerLane) {}

            @Override
            public void failed(String lane) {
                failed.add(lane);
            }
        });
        try {
            assertEquals(503, status("/default/?status=503", "x-lane", "gray"));
            assertEquals(404, status("/default/?status=404", "x-lane", "gray"));
            assertEquals(500, status("/default/?throw=1", "x-lane", "dev-alice"));
            get("/default/", "x-lane", "gray");
        } finally {
            unregister.run();
        }
        assertEquals(List.of("gray", "dev-alice"), failed);
    }

    private static int status(String path, String... headers) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(5));
        for (int i = 0; i < headers.length; i += 2) {
            request.header(headers[i], headers[i + 1]);
        }
        return CLIENT.send(request.build(), HttpResponse.BodyHandlers.discarding()).statusCode();
    }
}
