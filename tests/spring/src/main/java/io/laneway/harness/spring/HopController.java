package io.laneway.harness.spring;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

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
 * <p>A service broken by {@link #breakHop} calls the next one through a plain load-balanced
 * {@code RestTemplate} that is no bean, so laneway's interceptor is not on it: it carries neither
 * the lane header nor a probe mark.
 */
@RestController
class HopController {
    private static final Set<String> BROKEN = ConcurrentHashMap.newKeySet();

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

    /** Makes the service {@code key} ({@code NAME@IP:PORT}) call onward with a plain client, or not. */
    static void breakHop(String key, boolean broken) {
        if (broken) {
            BROKEN.add(key);
        } else {
            BROKEN.remove(key);
        }
    }

    @GetMapping(value = "/hop", produces = MediaType.TEXT_PLAIN_VALUE)
    ResponseEntity<String> hop() {
        if (next == null) {
            return ResponseEntity.ok(self + "\n");
        }
        try {
            RestTemplate client = BROKEN.contains(key) ? plain : restTemplate;
            String answer = client.getForObject("http://" + next + "/hop", String.class);
            return ResponseEntity.ok(self + " > " + (answer == null ? "" : answer.strip()) + "\n");
        } catch (RestClientResponseException e) {
            String body = e.getResponseBodyAsString().strip();
            return unavailable("error: " + e.getStatusCode().value() + (body.isEmpty() ? "" : " " + body));
        } catch (RuntimeException e) {
            return unavailable("error: " + e.getMessage());
        }
    }

    private ResponseEntity<String> unavailable(String what) {
        return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE)
                .contentType(MediaType.TEXT_PLAIN)
                .body(self + " > " + what.replace('\n', ' ') + "\n");
    }
}
