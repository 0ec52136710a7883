package io.laneway.harness.spring;

import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.cloud.client.loadbalancer.LoadBalancerInterceptor;
import org.springframework.core.env.Environment;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.client.RestClientResponseException;
import org.springframework.web.client.RestTemplate;

/**
 * {@code GET /hop}: one line, {@code NAME IP:PORT}, and with a next service
 * {@code NAME IP:PORT > <the next service's line>}. A failed call to the next service answers 503,
 * {@code NAME IP:PORT > error: <what failed>}.
 *
 * <p>A service broken by {@link #breakHop} calls the next one the ways lanes are lost: {@code plain},
 * through a load-balanced {@code RestTemplate} that is no bean, so laneway's interceptor is not on
 * it (it carries neither the lane header nor a probe mark); {@code pool}, from a bare thread pool
 * (not wrapped by {@code Lane.wrap}), which serves no request and so has no lane.
 */
@RestController
class HopController {
    private static final Map<String, String> BROKEN = new ConcurrentHashMap<>();
    private static final ExecutorService BARE = Executors.newCachedThreadPool();

    private final String self;
    private final String key;
    private final String next;
    private final RestTemplate restTemplate;
    private final RestTemplate plain = new RestTemplate();

    HopController(Environment environment, @Qualifier("restTemplate") RestTemplate restTemplate,
            ObjectProvider<LoadBalancerInterceptor> loadBalancer) {
        this.key = environment.getRequiredProperty(Apps.NAME) + "@" + environment.getRequiredProperty(Apps.ADDRESS);
        this.self = environment.getRequiredProperty(Apps.NAME) + " " + environment.getRequiredProperty(Apps.ADDRESS);
        String next = environment.getProperty(Apps.NEXT);
        this.next = next == null || next.isEmpty() ? null : next;
        this.restTemplate = restTemplate;
        loadBalancer.ifAvailable(plain.getInterceptors()::add);
    }

    /**
     * Makes the service {@code key} ({@code NAME@IP:PORT}) call onward the broken way {@code how}
     * ({@code plain}, {@code pool}), or as it should ({@code null}).
     */
    static void breakHop(String key, String how) {
        if (how == null) {
            BROKEN.remove(key);
        } else {
            BROKEN.put(key, how);
        }
    }

    @GetMapping(value = "/hop", produces = MediaType.TEXT_PLAIN_VALUE)
    ResponseEntity<String> hop() {
        if (next == null) {
            return ResponseEntity.ok(self + "\n");
        }
        try {
            String answer = onward("http://" + next + "/hop");
            return ResponseEntity.ok(self + " > " + (answer == null ? "" : answer.strip()) + "\n");
        } catch (RestClientResponseException e) {
            String body = e.getResponseBodyAsString().strip();
            return unavailable("error: " + e.getStatusCode().value() + (body.isEmpty() ? "" : " " + body));
        } catch (RuntimeException e) {
            return unavailable("error: " + e.getMessage());
        }
    }

    private String onward(String url) {
        switch (BROKEN.getOrDefault(key, "")) {
            case "plain":
                return plain.getForObject(url, String.class);
            case "pool":
                return CompletableFuture.supplyAsync(() -> restTemplate.getForObject(url, String.class), BARE).join();
            default:
                return restTemplate.getForObject(url, String.class);
        }
    }

    private ResponseEntity<String> unavailable(String what) {
        return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE)
                .contentType(MediaType.TEXT_PLAIN)
                .body(self + " > " + what.replace('\n', ' ') + "\n");
    }
}
