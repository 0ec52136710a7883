package io.laneway.lane.spring.cloud;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Optional;

import io.laneway.lane.Lane;
import io.laneway.lane.Probe;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.client.RestTemplateBuilder;
import org.springframework.boot.web.servlet.context.ServletWebServerApplicationContext;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.cloud.client.loadbalancer.LoadBalancerInterceptor;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.http.client.ClientHttpRequestInterceptor;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.client.RestClient;
import org.springframework.web.client.RestTemplate;
import org.springframework.web.reactive.function.client.WebClient;

/**
 * A Spring MVC application on an embedded Tomcat, configured only by the property, calls
 * {@code backend} (two instances: one baseline, one in {@code dev-alice}) through each
 * load-balanced client while it serves a request.
 */
class LanePropagationTest {
    private static Backend base;
    private static Backend alice;
    private static ConfigurableApplicationContext app;
    private static URI root;
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @RestController
    static class App {
        private final RestTemplate restTemplate;
        private final RestTemplate builtRestTemplate;
        private final RestClient restClient;
        private final WebClient webClient;

        App(@Qualifier("restTemplate") RestTemplate restTemplate,
                @Qualifier("builtRestTemplate") RestTemplate builtRestTemplate,
                @LoadBalanced RestClient.Builder restClient, @LoadBalanced WebClient.Builder webClient) {
            this.restTemplate = restTemplate;
            this.builtRestTemplate = builtRestTemplate;
            this.restClient = restClient.build();
            this.webClient = webClient.build();
        }

        @Bean
        @LoadBalanced
        static RestTemplate restTemplate() {
            return new RestTemplate();
        }

        @Bean
        @LoadBalanced
        static RestTemplate builtRestTemplate(RestTemplateBuilder builder) {
            return builder.build();
        }

        @Bean
        @LoadBalanced
        static RestClient.Builder restClientBuilder() {
            return RestClient.builder();
        }

        @Bean
        @LoadBalanced
        static WebClient.Builder webClientBuilder() {
            return WebClient.builder();
        }

        @GetMapping("/rest-template")
        String viaRestTemplate() {
            return restTemplate.getForObject("http://backend/", String.class);
        }

        @GetMapping("/built-rest-template")
        String viaBuiltRestTemplate() {
            return builtRestTemplate.getForObject("http://backend/", String.class);
        }

        @GetMapping("/rest-client")
        String viaRestClient() {
            return restClient.get().uri("http://backend/").retrieve().body(String.class);
        }

        @GetMapping("/web-client")
        String viaWebClient() {
            return webClient.get().uri("http://backend/").retrieve().bodyToMono(String.class).block();
        }

        @GetMapping("/own-header")
        String withOwnHeader() {
            return restClient.get().uri("http://backend/").header("X-Lane", "dev-alice").retrieve().body(String.class);
        }

        @GetMapping("/lane")
        String lane() {
            return String.valueOf(Lane.current());
        }
    }

    @BeforeAll
    static void start() throws Exception {
        base = new Backend("base");
        alice = new Backend("alice");
        String instances = "spring.cloud.discovery.client.simple.instances.backend";
        app = new SpringApplicationBuilder(App.class).properties(
                "server.port=0",
                "server.address=127.0.0.1",
                "spring.main.banner-mode=off",
                "spring.application.name=front",
                "laneway.pod-name=front-0",
                "spring.cloud.loadbalancer.configurations=laneway",
                "spring.cloud.loadbalancer.cache.enabled=false",
                instances + "[0].uri=" + base.uri(),
                instances + "[0].metadata[laneway.lanes]=baseline,dev-bob",
                instances + "[1].uri=" + alice.uri(),
                instances + "[1].metadata[laneway.lanes]=dev-alice").run();
        int port = ((ServletWebServerApplicationContext) app).getWebServer().getPort();
        root = URI.create("http://127.0.0.1:" + port);
    }

    @AfterAll
    static void stop() {
        if (app != null) {
            app.close();
        }
        if (base != null) {
            base.close();
        }
        if (alice != null) {
            alice.close();
        }
    }

    @AfterEach
    void clear() {
        Lane.set(null);
    }

    private static HttpResponse<String> get(String path, String... headers) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(root.resolve(path)).timeout(Duration.ofSeconds(10));
        if (headers.length > 0) {
            request.headers(headers);
        }
        return HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static void assertRoutes(String path) throws Exception {
        for (int i = 0; i < 4; i++) {
            assertEquals("alice x-lane=dev-alice", get(path, "x-lane", "dev-alice").body(), path);
            assertEquals("base x-lane=dev-bob", get(path, "x-lane", "dev-bob").body(), path);
            assertEquals("base x-lane=-", get(path).body(), path);
            assertEquals("alice x-lane=dev-alice", get(path, "baggage", "lane=dev-alice").body(), path);
        }
    }

    @Test
    void theServletFilterTakesTheRequestsLane() throws Exception {
        assertEquals("dev-alice", get("/lane", "x-lane", "dev-alice").body());
        assertEquals("dev-alice", get("/lane", "baggage", "k=v,lane=dev-alice").body());
        assertEquals("null", get("/lane", "x-lane", "not a lane").body());
        assertEquals("null", get("/lane").body());
    }

    @Test
    void aRestTemplateBeanCarriesTheLaneToTheInstanceOfThatLane() throws Exception {
        assertRoutes("/rest-template");
    }

    @Test
    void aRestTemplateFromSpringBootsBuilderToo() throws Exception {
        assertRoutes("/built-rest-template");
    }

    @Test
    void aRestClientToo() throws Exception {
        assertRoutes("/rest-client");
    }

    @Test
    void aWebClientBlockedOnWhileServingToo() throws Exception {
        assertRoutes("/web-client");
    }

    @Test
    void theApplicationsOwnHeaderWins() throws Exception {
        assertEquals("alice x-lane=dev-alice", get("/own-header").body());
        assertEquals("alice x-lane=dev-alice", get("/own-header", "x-lane", "dev-bob").body());
    }

    @Test
    void aLaneNoInstanceServesReachesNoInstance() throws Exception {
        int before = base.hits.get() + alice.hits.get();
        HttpResponse<String> response = get("/rest-template", "x-lane", "dev-carol");
        assertEquals(500, response.statusCode());
        assertEquals(before, base.hits.get() + alice.hits.get());
    }

    @Test
    void lanewaysInterceptorIsFirstAndThereOnce() {
        for (String name : List.of("restTemplate", "builtRestTemplate")) {
            List<ClientHttpRequestInterceptor> interceptors = app.getBean(name, RestTemplate.class).getInterceptors();
            assertInstanceOf(LaneClientHttpRequestInterceptor.class, interceptors.get(0), name);
            assertEquals(1, interceptors.stream().filter(i -> i instanceof LaneClientHttpRequestInterceptor).count(), name);
            assertTrue(interceptors.stream().anyMatch(i -> i instanceof LoadBalancerInterceptor), name);
        }
    }

    @Test
    void outsideAnyRequestTheThreadsLaneIsUsed() {
        RestTemplate restTemplate = app.getBean("restTemplate", RestTemplate.class);
        Lane.set("dev-alice");
        assertEquals("alice x-lane=dev-alice", restTemplate.getForObject("http://backend/", String.class));
        Lane.set(null);
        assertEquals("base x-lane=-", restTemplate.getForObject("http://backend/", String.class));
    }

    @Test
    void aProbedRequestIsAnsweredWithItsHopAndThoseOfItsRestTemplateRestClientAndWebClientCalls() throws Exception {
        for (String path : List.of("/rest-template", "/rest-client", "/web-client")) {
            HttpResponse<String> response = get(path, "x-lane", "dev-alice", Probe.MARK, "p-1");
            assertEquals("alice x-lane=dev-alice", response.body());
            assertEquals("[{\"app\":\"front\",\"pod\":\"front-0\",\"lane\":\"dev-alice\",\"learnt\":\"header\",\"own\":null},"
                    + "{\"pod\":\"alice\"}]", response.headers().firstValue(Probe.HOPS).orElse(null), path);
        }
        assertEquals(Optional.empty(), get("/rest-template", "x-lane", "dev-alice").headers().firstValue(Probe.HOPS));
    }
}
