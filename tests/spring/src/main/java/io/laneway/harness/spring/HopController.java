package io.laneway.harness.spring;

import org.springframework.beans.factory.annotation.Qualifier;
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
 */
@RestController
class HopController {
    private final String self;
    private final String next;
    private final RestTemplate restTemplate;

    HopController(Environment environment, @Qualifier("restTemplate") RestTemplate restTemplate) {
        this.self = environment.getRequiredProperty(Apps.NAME) + " " + environment.getRequiredProperty(Apps.ADDRESS);
        String next = environment.getProperty(Apps.NEXT);
        this.next = next == null || next.isEmpty() ? null : next;
        this.restTemplate = restTemplate;
    }

    @GetMapping(value = "/hop", produces = MediaType.TEXT_PLAIN_VALUE)
    ResponseEntity<String> hop() {
        if (next == null) {
            return ResponseEntity.ok(self + "\n");
        }
        try {
            String answer = restTemplate.getForObject("http://" + next + "/hop", String.class);
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
